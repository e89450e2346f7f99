"""The views: small Viewers that watch the state and draw it (lanes, strips, readouts, curves, log, guide, controls, live)."""
