"""The read path: selectors over Redis, the HTTP API and the server-rendered pages."""
