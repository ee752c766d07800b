"""Renderers: one module per output format. They format analysis results; they compute nothing."""
