"""Benchmarks that write the Markdown tables under results/ (``python -m benchmarks.NAME``)."""
