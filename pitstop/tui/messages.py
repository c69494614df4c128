"""Provides the messages the reader threads post to the app (data goes through an Inbox)."""

from __future__ import annotations

from textual.message import Message

from pitstop.tui.replay import Timeline


class BatchesArrived(Message):
    """Doorbell: the reader thread put batches in the app's inbox.

    The batches themselves wait in the Inbox; a doorbell still queued makes a
    new one redundant, so it may replace it (coalescing under load).
    """

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, BatchesArrived)


class ReplayLoaded(Message):
    """A replay source has been read to its end and indexed: its timeline, at the end."""

    def __init__(self, timeline: Timeline) -> None:
        super().__init__()
        self.timeline = timeline


class LogLinesArrived(Message):
    """Doorbell: the log tail thread put lines in the app's log inbox."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LogLinesArrived)


class CommandReplied(Message):
    """The agent answered a command ("profile", "stop") sent from a worker thread."""

    def __init__(self, command: str, reply: str, error: bool = False) -> None:
        super().__init__()
        self.command = command
        self.reply = reply
        self.error = error
