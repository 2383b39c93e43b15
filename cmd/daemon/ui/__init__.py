"""The live page: a read-only view of the log's sessions, keys and spend, served at ``/ui``.

``page.py`` serves it, ``signin.py`` signs a browser in without the token ever being in
a URL, ``static/`` holds the page's only files (no build step, nothing from elsewhere).
"""
