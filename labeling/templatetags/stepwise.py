from collections.abc import Iterator

from django import template
from django.template.defaultfilters import stringfilter
from django.utils.html import escape, linebreaks
from django.utils.safestring import SafeString, mark_safe

from labeling.prm800k import answer_section

register = template.Library()


@register.filter
def step_html(text: str) -> SafeString:
    """A step's text as HTML: escaped, paragraphs kept, PRM800K's `# Answer` section shown as such."""
    section = answer_section(text)  # the badge shows exactly when the step ends the solution
    body = text.strip() if section is None else section.body
    html = linebreaks(escape(body)) if body else ""
    if section is not None:
        html += f'<p class="answer-line"><span class="answer-label">Answer</span> {escape(section.answer)}</p>'
    return mark_safe(html)  # noqa: S308 - every piece above is escaped


@register.filter
def duration_ms(ms: int | None) -> str:
    """Milliseconds as a short human duration: 950 ms, 42 s, 3 min 5 s, 2 h 10 min."""
    if ms is None:
        return "—"
    if ms < 1000:
        return f"{ms} ms"
    seconds = round(ms / 1000)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


@register.filter
def plain_markup(text: str) -> SafeString:
    html: list[str] = []
    paragraph: list[str] = []
    in_list = False

    def flush() -> None:
        nonlocal in_list
        if paragraph:
            html.append("<p>" + "<br>".join(paragraph) + "</p>")
            paragraph.clear()
        if in_list:
            html.append("</ul>")
            in_list = False

    for raw in (text or "").splitlines():
        line = escape(raw.rstrip())
        if not line.strip():
            flush()
        elif line.startswith("## "):
            flush()
            html.append(f"<h3>{line[3:]}</h3>")
        elif line.startswith("# "):
            flush()
            html.append(f"<h2>{line[2:]}</h2>")
        elif line.lstrip().startswith("- "):
            if paragraph:
                html.append("<p>" + "<br>".join(paragraph) + "</p>")
                paragraph.clear()
            if not in_list:
                html.append("<ul>")
                in_list = True
            html.append(f"<li>{line.lstrip()[2:]}</li>")
        else:
            if in_list:
                html.append("</ul>")
                in_list = False
            paragraph.append(line)
    flush()
    return mark_safe("\n".join(html))  # noqa: S308 - every piece was escaped above


@register.filter
def signed(value) -> str:
    if value is None:
        return "·"
    return {1: "+1", 0: "0", -1: "−1"}.get(value, str(value))


@register.filter
def percent(value, digits: int = 0) -> str:
    if value is None or value == "":  # "": a missing row's field, as a template reads it
        return "—"
    return f"{100 * value:.{digits}f}%"


@register.filter
def duration(value) -> str:
    """A timedelta as '2 d 4 h', '3 h 20 min' or '12 min'."""
    if value is None:
        return "—"
    minutes = int(value.total_seconds() // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{max(minutes, 1)} min"


# The delimiters static/js/app.js gives KaTeX's auto-render, in its order (`$$` before `$`).
MATH_DELIMITERS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))
ELLIPSIS = "…"


def _math_span_end(text: str, start: int, right: str, stop: int) -> int | None:
    """Where the math opened just before `start` ends (past its `right` delimiter), scanning as
    auto-render does: a backslash escapes the next character, and only a delimiter outside every
    brace closes. None when it does not close by `stop`, or when a `}` has no `{`."""
    depth = 0
    i = start
    while i < len(text) and i <= stop:
        if depth == 0 and text.startswith(right, i):
            return i + len(right)
        char = text[i]
        if char == "\\":
            i += 1
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth < 0:
                return None
        i += 1
    return None


def _math_safe_cuts(text: str, stop: int) -> Iterator[int]:
    """Every position up to `stop` where `text` may be cut without cutting a math span: outside
    math, between whole spans whose braces balance. `\\$` is a dollar, not a delimiter. A span
    that never closes or whose braces do not balance ends the safe positions."""
    i = 0
    while i <= stop:
        yield i
        if i >= len(text):
            return
        if text.startswith("\\$", i):
            i += 2
            continue
        opened = next(
            ((left, right) for left, right in MATH_DELIMITERS if text.startswith(left, i)), None
        )
        if opened is None:
            i += 1
            continue
        end = _math_span_end(text, i + len(opened[0]), opened[1], stop)
        if end is None:
            return
        i = end


@register.filter(is_safe=False)
@stringfilter
def math_preview(text: str, limit: int | str) -> str:
    """`text` cut to at most `limit` characters (plus "…") where no math span is cut.

    The cut falls outside `$…$`, `$$…$$`, `\\(…\\)` and `\\[…\\]`, so KaTeX renders the preview's
    math whole instead of showing half a formula's source. When math fills the first `limit`
    characters, the first whole span is kept if it ends within 3 × `limit`; past that the preview
    is only "…" (the full text belongs in the element's `title`). A span the text itself leaves
    unclosed, or with unbalanced braces, is never shown: the preview stops before it, even
    when the whole text would fit."""
    try:
        limit = int(limit)
    except (TypeError, ValueError):
        return text
    cuts = list(_math_safe_cuts(text, 3 * max(limit, 0)))
    if len(text) <= limit and cuts[-1] == len(text):
        return text
    first_visible = len(text) - len(text.lstrip())
    shown = [cut for cut in cuts if cut > first_visible]
    within = [cut for cut in shown if cut <= limit]
    cut = within[-1] if within else (shown[0] if shown else 0)
    if cut == len(text):  # all math, one span longer than `limit`: shown whole
        return text
    return text[:cut].rstrip() + ELLIPSIS
