"""One reader's page: the layout, the first visit (the simulator prepared while a placeholder shows), and the URL."""
