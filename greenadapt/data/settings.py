"""Where a task file's fields are: options of ``finetune``, ``predict`` and ``evaluate``, declared once."""

from __future__ import annotations

from dataclasses import dataclass

from greenadapt.options import INPUT_OUTPUT, Settings, option

HEADERS = ("auto", "yes", "no")  # --header: a TSV file's first row is a header when it looks like one, always, never


@dataclass(frozen=True, kw_only=True)
class FieldSettings(Settings):
    text_field: str | None = option(None, "--text-field", panel=INPUT_OUTPUT,
                                    help="Text field (JSON) or column (TSV: header name or 0-based number); NER JSON: the token list.")
    pair_field: str | None = option(None, "--pair-field", panel=INPUT_OUTPUT,
                                    help="Second text of a sentence pair (JSON field or TSV column).")
    label_field: str | None = option(None, "--label-field", panel=INPUT_OUTPUT, help="Label field or column; NER JSON: the tag list.")

    def reader_overrides(self, header: str | None) -> dict[str, str | None]:
        return {"text_field": self.text_field, "pair_field": self.pair_field, "label_field": self.label_field, "header": header}
