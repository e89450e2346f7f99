"""The static build: the explorable as files for a course page with no server."""
