"""Release and maintenance tools (python -m scripts.<name>)."""
