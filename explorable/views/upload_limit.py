"""The upload's size limit, kept in the browser: a file over it is never read nor sent.

Bokeh's FileInput reads a chosen file whole and sends it, base64-encoded, in one websocket message; one over the
server's --websocket-max-message-size would close the page's connection, and one under it but over the page's
limit would cost the server its decoding for nothing. So before bokehjs sees the choice, a listener on the
input's shadow root (capture phase: it runs before the input's own listener) refuses a file over the limit,
clears the choice and says so beside the input, in one line. The listener is attached when the reader first
points at, drags onto or tabs to a file input (those events cross shadow roots: `composedPath` finds the input),
and the page is looked through for file inputs three times while it is drawn (a few ms each). The server refuses
a larger message anyway (explorable.server.guard).
"""
from __future__ import annotations

import panel as pn

_SCRIPT = """<script>
(() => {
  if (window.__cbUploadLimit) return;
  window.__cbUploadLimit = true;
  const LIMIT = %d;
  const mb = (n) => (n / 1e6).toFixed(1) + " MB";
  const guard = (root) => {
    if (root.__cbGuarded) return;
    root.__cbGuarded = true;
    root.addEventListener("change", (event) => {
      const input = event.target;
      if (!input || input.type !== "file") return;
      const old = root.querySelector(".cb-upload-refused");
      if (old) old.remove();
      const big = [...(input.files || [])].find((f) => f.size > LIMIT);
      if (!big) return;
      event.stopImmediatePropagation();
      input.value = "";
      const line = document.createElement("div");
      line.className = "cb-upload-refused";
      line.setAttribute("role", "alert");
      line.style.cssText = "color:#9b2c1f;font-size:13px;margin-top:4px";
      line.textContent = big.name.slice(0, 60) + " is " + mb(big.size) + "; the limit here is " + mb(LIMIT) +
        ": nothing was sent. Cut the file (e.g. head -n 20000 file > part) and choose the part.";
      input.insertAdjacentElement("afterend", line);
    }, true);
  };
  const seen = (event) => {
    for (const el of event.composedPath()) {
      if (el instanceof HTMLInputElement && el.type === "file") guard(el.getRootNode());
    }
  };
  for (const kind of ["pointerdown", "dragenter", "focusin", "keydown"]) {
    document.addEventListener(kind, seen, true);
  }
  const scan = (root) => {  // (a few times while the page is drawn: a script may set a file without a click)
    for (const el of root.querySelectorAll("*")) {
      if (el instanceof HTMLInputElement && el.type === "file") guard(el.getRootNode());
      if (el.shadowRoot) scan(el.shadowRoot);
    }
  };
  for (const ms of [1500, 5000, 15000]) setTimeout(() => scan(document), ms);
})();
</script>"""


def upload_limit_script(limit_bytes: int) -> pn.pane.HTML:
    """An invisible pane whose script keeps every file input on the page to `limit_bytes`."""
    return pn.pane.HTML(_SCRIPT % limit_bytes, margin=0, height=0, sizing_mode="stretch_width",
                        css_classes=["upload-limit"])
