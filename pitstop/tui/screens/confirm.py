"""Provides ConfirmScreen: a Yes/No modal, answering True only on an explicit yes."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class ConfirmScreen(ModalScreen[bool]):
    """Asks one question; `y` or the Yes button (its label may differ) answers True, anything else False."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
        Binding("escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str, *, yes: str = "Yes", no: str = "No", danger: bool = True) -> None:
        super().__init__()
        self.question = question
        self.yes_label = yes
        self.no_label = no
        self.danger = danger  # red for an answer that stops something, blue for one that starts it

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Label(self.question, id="confirm-question")
            with Horizontal(id="confirm-buttons"):
                yield Button(f"{self.yes_label} (y)", variant="error" if self.danger else "success", id="yes")
                yield Button(f"{self.no_label} (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        # The safe answer has the focus: enter on a reflex does not stop a run.
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
