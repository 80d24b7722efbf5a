from django import template
from django.utils.html import escape, linebreaks
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

ANSWER_MARK = "# Answer"


@register.filter
def step_html(text: str) -> SafeString:
    """A step's text as HTML: escaped, paragraphs kept, PRM800K's `# Answer` section shown as such."""
    body, marker, answer = text.partition(ANSWER_MARK)
    html = linebreaks(escape(body.strip())) if body.strip() else ""
    if marker:
        html += f'<p class="answer-line"><span class="answer-label">Answer</span> {escape(answer.strip())}</p>'
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
    if value is None:
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
