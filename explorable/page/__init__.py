"""One reader's page: the layout, its assets, the first visit, and the URL it is synced to."""
