"""Benchmarks that write the Markdown tables under results/<topic>/ (``python -m benchmarks.NAME``; results/README.md
lists the topics)."""
