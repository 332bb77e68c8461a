"""Headless Chromium as the browser tests run it: from a file:// URL, offline."""

#: The command-line flags: headless, no sandbox, GPU, first-run pages, extensions or background traffic; a proxy that
#: refuses and a resolver that finds nothing, so a page that needs the network fails.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-extensions",
    "--no-default-browser-check",
    "--mute-audio",
    "--proxy-server=127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND",
]
