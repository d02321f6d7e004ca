"""Node forms ONNX Runtime's CPU kernels compute wrongly (:func:`known_wrong_node`, :func:`check_known_wrong`):
refused by ``supports()`` and at compile, by the backend and its linker (which do not import each other for it).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from collage.backends.base import op_name
from collage.errors import UnsupportedError

if TYPE_CHECKING:
    import onnx  # checked at compile time only: loading an artifact never imports onnx

# ---------------------------------------------------------------------- node forms ORT computes wrongly
# Found by ONNX's own backend tests run through collage (results/onnx-conformance.md, onnxruntime 1.32):
# these node forms run without an error and return values that differ from ONNX's reference outputs,
# so ``supports()`` refuses them (another backend, or none, takes the node) instead of returning them.
def _attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            from onnx import helper

            return helper.get_attribute_value(a)
    return default


def _given(node: onnx.NodeProto, k: int) -> bool:
    return len(node.input) > k and bool(node.input[k])


def _wrong_reason(node: onnx.NodeProto) -> str | None:
    if node.domain not in ("", "ai.onnx"):
        return None
    op = node.op_type
    if op == "Attention" and _attr(node, "is_causal", 0) and _given(node, 3) and _given(node, 4):
        # test_attention_4d_with_past_and_present_qk_matmul_bias_{3d,4d}_mask_causal: -inf where ONNX has values
        return ("Attention with is_causal=1, an attention mask and a past key: onnxruntime's CPU kernel masks "
                "other positions than ONNX's reference (ONNX backend test attention_4d_with_past_and_present_*_causal)")
    if op == "MaxUnpool" and _given(node, 2):
        # test_maxunpool_export_with_output_shape: values land at other positions
        return ("MaxUnpool with an output_shape input: onnxruntime places the values elsewhere than ONNX's "
                "reference (ONNX backend test maxunpool_export_with_output_shape)")
    if op == "Resize" and _attr(node, "coordinate_transformation_mode", b"half_pixel") in (b"align_corners",
                                                                                          "align_corners") \
            and _attr(node, "mode", b"nearest") not in (b"nearest", "nearest") and not _given(node, 3):
        # test_resize_downsample_scales_{linear,cubic}_align_corners
        return ("Resize (linear/cubic) with align_corners and scales: onnxruntime's downsampling differs from ONNX's "
                "reference (ONNX backend tests resize_downsample_scales_*_align_corners)")
    return None


def known_wrong_node(model: onnx.ModelProto) -> tuple[onnx.NodeProto, str] | None:
    """The first node of ``model`` in a form ONNX Runtime computes wrongly (see above), with the reason."""
    for node in model.graph.node:
        reason = _wrong_reason(node)
        if reason is not None:
            return node, reason
    return None


def check_known_wrong(backend_name: str, model: onnx.ModelProto) -> None:
    """Raise ``UnsupportedError`` naming the first node of ``model`` ONNX Runtime computes wrongly."""
    found = known_wrong_node(model)
    if found is not None:
        node, reason = found
        raise UnsupportedError(f"{backend_name} cannot take op {op_name(node)} (node {node.name or node.output[0]!r} "
                               f"of model {model.graph.name!r}): {reason}")


__all__ = ["check_known_wrong", "known_wrong_node"]
