"""What a test's page saw, for a failure's message: from its first script on (capture listeners,
before the page's own), the keys, the clicks on buttons and links, htmx's requests and swaps,
each with the milliseconds since its document began; and the page's navigations and errors.

Every `page` (tests/conftest.py) is traced; a failed test's report carries each open page's
trace, which tells a key the page never saw from one that clicked nothing, a request that never
left, an answer that never settled, or a navigation that replaced the page.
"""

from __future__ import annotations

TRACE_SCRIPT = """
window.__trace = [];
(function () {
  function note(what) {
    if (window.__trace.length < 400) window.__trace.push(Math.round(performance.now()) + ' ' + what);
  }
  function panelState() {
    var p = document.querySelector('#labeling');
    return ' panel=' + (p ? p.className : 'none') +
           ' keys=' + (document.documentElement.dataset.keys || '-') +
           ' retrying=' + (document.documentElement.dataset.retrying || '-');
  }
  note('document ' + location.pathname + location.search);
  window.addEventListener('keydown', function (e) {
    note('keydown ' + e.key + ' on ' + (e.target && e.target.tagName) + panelState());
  }, true);
  window.addEventListener('click', function (e) {
    var b = e.target && e.target.closest && e.target.closest('button, a');
    if (b) note('click ' + (b.dataset.keyAction || b.id || b.tagName) + (b.disabled ? ' (disabled)' : ''));
  }, true);
  ['htmx:beforeRequest', 'htmx:afterRequest', 'htmx:sendError', 'htmx:responseError',
   'htmx:afterSettle', 'htmx:swapError', 'htmx:oobErrorNoTarget'].forEach(function (name) {
    document.addEventListener(name, function (e) {
      var d = e.detail || {};
      var elt = d.elt ? (d.elt.id || d.elt.dataset && d.elt.dataset.keyAction || d.elt.tagName) : '';
      note(name + ' ' + elt + (d.pathInfo ? ' ' + d.pathInfo.requestPath : '') +
           (d.xhr ? ' status=' + d.xhr.status : ''));
    }, true);
  });
  window.addEventListener('error', function (e) { note('error ' + e.message); });
})();
"""

READ_TRACE = "() => (window.__trace || []).join('\\n')"


class PageLog:
    """A page's navigations and errors, recorded by Playwright's events."""

    def __init__(self, page) -> None:
        self.lines: list[str] = []
        page.on("framenavigated", lambda frame: self._note(frame, f"navigated to {frame.url}"))
        page.on("pageerror", lambda error: self.lines.append(f"page error: {error}"))
        self.page = page

    def _note(self, frame, line: str) -> None:
        if frame == self.page.main_frame:
            self.lines.append(line)

    def report(self) -> str:
        try:
            trace = self.page.evaluate(READ_TRACE)
        except Exception as exc:  # a closed or hung page: say so, keep what was logged
            trace = f"(could not read the page's trace: {exc.__class__.__name__})"
        return "\n".join([*self.lines, f"at {self.page.url}:", trace])
