"""Layout checks run in chromium: what a person would see cut off."""

from __future__ import annotations

# The selects under `root` (a CSS selector) too narrow for their longest choice: each one's
# width beside the width it would take to show every choice whole (a copy of it, unconstrained,
# measured where it stands so the page's rules for it still apply).
CLIPPED_SELECTS = """(root) => [...document.querySelectorAll(`${root} select`)].flatMap((select) => {
  const probe = select.cloneNode(true);
  probe.removeAttribute("id");
  probe.style.cssText = "position: absolute; visibility: hidden; width: auto; min-width: 0; "
    + "max-width: none; flex: none";
  select.after(probe);
  const needed = probe.getBoundingClientRect().width;
  probe.remove();
  const width = select.getBoundingClientRect().width;
  return needed > width + 0.5 ? [{name: select.name, width, needed}] : [];
})"""
