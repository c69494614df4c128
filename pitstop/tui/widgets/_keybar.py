"""Provides KeyBar: the footer line of keys, drawn as one line of text.

Textual's Footer recomposes a widget per key whenever the bindings change, i.e.
on every screen switch: measured with benchmarks/viewer.py (80x24, live), it
was most of a switch (p50 ~100 ms, p95 ~245 ms; with one line of text 14 and
~40 ms). This bar shows the same bindings (those with `show`, as `check_action`
leaves them) and redraws when they change, creating no widgets. A click on a
key runs its action, as on Footer.
"""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.app import RenderResult
from textual.screen import Screen
from textual.widget import Widget


class KeyBar(Widget):
    """One line: each shown binding as "key description"."""

    COMPONENT_CLASSES = {"keybar--key", "keybar--description"}
    DEFAULT_CSS = """
    KeyBar {
        height: 1;
        dock: bottom;
        background: $footer-background;
        color: $footer-foreground;
    }
    KeyBar > .keybar--key {
        color: $footer-key-foreground;
        text-style: bold;
    }
    KeyBar > .keybar--description {
        color: $footer-description-foreground;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._spans: list[tuple[int, int, str]] = []  # (start, end, action) of each key, for clicks

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen[object]) -> None:
        if self.is_attached and screen is self.screen:
            self.refresh()

    def render(self) -> RenderResult:
        key_style = self.get_component_rich_style("keybar--key")
        text_style = self.get_component_rich_style("keybar--description")
        text = Text(no_wrap=True, overflow="crop")
        seen: set[str] = set()
        self._spans = []
        for _node, binding, enabled, _tooltip in self.screen.active_bindings.values():
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            start = len(text)
            text.append(f" {self.app.get_key_display(binding)} ", style=key_style if enabled else "dim")
            text.append(binding.description, style=text_style if enabled else "dim")
            self._spans.append((start, len(text), binding.action))
        return text

    async def on_click(self, event: events.Click) -> None:
        for start, end, action in self._spans:
            if start <= event.x < end:
                await self.app.run_action(action, self.screen)
                return
