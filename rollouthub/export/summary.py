""":class:`ExportSummary`: what an export did, counted while its rows stream (the CLI's last line)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict

__all__ = ["ExportSummary"]


@dataclass
class ExportSummary:
    """What an export did: rows written, rollouts selected and exported, why the other rollouts were skipped, why
    rows were dropped (duplicates, pairs of identical answers) and what was counted inside the exported rollouts."""

    format: str
    rows: int = 0
    rollouts_selected: int = 0
    rollouts_exported: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)
    notes: Counter[str] = field(default_factory=Counter)
    """Things counted inside exported rollouts (``trajectories``: calls without token ids, prompt mismatches...)."""

    def skip(self, reason: str, count: int = 1) -> None:
        """Count ``count`` rollouts skipped for ``reason``."""
        self.skipped[reason] += count

    def drop(self, reason: str, count: int = 1) -> None:
        """Count ``count`` rows (or pairs) left out for ``reason``."""
        self.dropped[reason] += count

    def note(self, what: str, count: int = 1) -> None:
        """Count ``count`` occurrences of ``what`` inside the exported rollouts."""
        self.notes[what] += count

    def describe(self) -> str:
        """One line, e.g. ``"120 rows from 118 of 124 selected rollouts; skipped 6: 4 no LLM call, 2 no final
        reward"``; preferences count pairs and say why there are none; the notes come last (``"; 6 calls without
        token ids"``)."""
        noun = "pair" if self.format == "preferences" else "row"
        text = f"{self.rows} {noun}{'' if self.rows == 1 else 's'} from {self.rollouts_exported} of "
        text += f"{self.rollouts_selected} selected rollouts"
        if self.format == "preferences" and self.rows == 0 and not self.dropped:
            text += " (no input has two answers to one prompt with different rewards)"
        for label, counts in (("skipped", self.skipped), ("dropped", self.dropped)):
            if counts:
                reasons = ", ".join(f"{n} {reason}" for reason, n in counts.most_common())
                text += f"; {label} {sum(counts.values())}: {reasons}"
        if self.notes:
            text += "; " + ", ".join(f"{n} {what}" for what, n in self.notes.most_common())
        return text

    def as_dict(self) -> Dict[str, Any]:
        """JSON-able form."""
        return {
            "format": self.format,
            "rows": self.rows,
            "rollouts_selected": self.rollouts_selected,
            "rollouts_exported": self.rollouts_exported,
            "skipped": dict(self.skipped),
            "dropped": dict(self.dropped),
            "notes": dict(self.notes),
        }
