"""`python -m explorable.export --out DIR`: the static build's command (the build itself is
`explorable.static_site.export`); kept at this name because course authors' scripts call it."""
import sys

from explorable.static_site.export import main

if __name__ == "__main__":
    sys.exit(main())
