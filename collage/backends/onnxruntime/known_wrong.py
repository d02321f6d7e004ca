"""Node forms ONNX Runtime's CPU kernels compute wrongly (:func:`known_wrong_node`, :func:`check_known_wrong`):
refused by ``supports()`` and at compile, by the backend and its linker (which do not import each other for it).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from collage.backends.base import first_refused, node_attr, refuse

if TYPE_CHECKING:
    import onnx  # checked at compile time only: loading an artifact never imports onnx

# ---------------------------------------------------------------------- node forms ORT computes wrongly
# Found by ONNX's own backend tests run through collage (results/backends/onnx-conformance.md, onnxruntime 1.32):
# these node forms run without an error and return values that differ from ONNX's reference outputs,
# so ``supports()`` refuses them (another backend, or none, takes the node) instead of returning them.
def _given(node: onnx.NodeProto, k: int) -> bool:
    return len(node.input) > k and bool(node.input[k])


def _wrong_reason(node: onnx.NodeProto) -> str | None:
    if node.domain not in ("", "ai.onnx"):
        return None
    op = node.op_type
    if op == "Attention" and node_attr(node, "is_causal", 0) and _given(node, 3) and _given(node, 4):
        # test_attention_4d_with_past_and_present_qk_matmul_bias_{3d,4d}_mask_causal: -inf where ONNX has values
        return ("Attention with is_causal=1, an attention mask and a past key: onnxruntime's CPU kernel masks "
                "other positions than ONNX's reference (ONNX backend test attention_4d_with_past_and_present_*_causal)")
    if op == "MaxUnpool" and _given(node, 2):
        # test_maxunpool_export_with_output_shape: values land at other positions
        return ("MaxUnpool with an output_shape input: onnxruntime places the values elsewhere than ONNX's "
                "reference (ONNX backend test maxunpool_export_with_output_shape)")
    if op == "Resize" and node_attr(node, "coordinate_transformation_mode", "half_pixel") == "align_corners" \
            and node_attr(node, "mode", "nearest") != "nearest" and not _given(node, 3):
        # test_resize_downsample_scales_{linear,cubic}_align_corners
        return ("Resize (linear/cubic) with align_corners and scales: onnxruntime's downsampling differs from ONNX's "
                "reference (ONNX backend tests resize_downsample_scales_*_align_corners)")
    return None


def known_wrong_node(model: onnx.ModelProto) -> tuple[onnx.NodeProto, str] | None:
    """The first node of ``model`` in a form ONNX Runtime computes wrongly (see above), with the reason."""
    return first_refused(model, _wrong_reason)


def check_known_wrong(backend_name: str, model: onnx.ModelProto) -> None:
    """Raise ``UnsupportedError`` naming the first node of ``model`` ONNX Runtime computes wrongly."""
    refuse(backend_name, model, known_wrong_node(model))


__all__ = ["check_known_wrong", "known_wrong_node"]
