"""One module per embedded server."""
