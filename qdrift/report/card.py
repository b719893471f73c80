"""The disclosure card of a served configuration: JSON under a versioned schema, and markdown.

A card says what precision the served model runs at, per phase (from the spec string, which it
quotes exactly), and what it was verified against and how: the tool-call verification against a
reference with intervals (from a `qdrift verify run` directory), short-form benchmark deltas and
long-horizon success at stated horizons with intervals (from a sweep store), with dates, the qdrift
version and sha256 hashes of the data used. The schema ships as package data
(`card-<version>.schema.json`); `load_card` and `write_card` validate against it and name the
offending field on failure.
"""

from __future__ import annotations

import datetime as dt
import json
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from qdrift.report.precision import precision_of
from qdrift.spec.fingerprint import served_tag
from qdrift.spec.model import QuantSpec

SCHEMA_VERSION = "1.0"
KIND = "qdrift-disclosure-card"


class CardError(ValueError):
    """A card that does not validate against its schema."""


def schema(version: str = SCHEMA_VERSION) -> dict:
    """The JSON Schema of card version `version`, read from the package."""
    name = f"card-{version}.schema.json"
    path = resources.files("qdrift.report") / name
    if not path.is_file():
        known = sorted(p.name for p in resources.files("qdrift.report").iterdir() if p.name.endswith(".schema.json"))
        raise CardError(f"unknown card schema version {version!r}; this qdrift knows: {', '.join(known)}")
    return json.loads(path.read_text(encoding="utf-8"))


def validate_card(card: Any, where: str = "card") -> dict:
    """`card` itself when it validates against the schema of its `schema_version`; CardError otherwise."""
    if not isinstance(card, dict):
        raise CardError(f"{where}: a card is a JSON object, got {type(card).__name__}")
    version = card.get("schema_version")
    if not isinstance(version, str):
        raise CardError(f"{where}: missing or non-string 'schema_version' (this qdrift writes {SCHEMA_VERSION!r})")
    validator = jsonschema.Draft202012Validator(schema(version))
    errors = sorted(validator.iter_errors(card), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        e = errors[0]
        at = "/".join(map(str, e.absolute_path)) or "(top level)"
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise CardError(f"{where} does not validate against card schema {version}: at {at}: {e.message}{more}")
    return card


def load_card(path: str | Path) -> dict:
    """Read a card.json and validate it against its schema."""
    path = Path(path)
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise CardError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    return validate_card(card, str(path))


def _served_tags(fingerprints: list[str]) -> set[str] | None:
    """The spec tags in qdrift servers' fingerprints, or None when any answer came from another server."""
    tags = [served_tag(f) for f in fingerprints]
    if not tags or None in tags:
        return None
    return set(tags)


def _check_served_spec(spec: QuantSpec, fingerprints: list[str]) -> None:
    """A card must not describe a spec other than the one a qdrift server says it served."""
    tags = _served_tags(fingerprints)
    if tags is None:
        return
    want = {"baseline", spec.hash} if spec.is_noop else {spec.hash}
    if not tags <= want:
        raise CardError(f"the verified endpoint's answers say it served {', '.join(sorted(fingerprints))} "
                        f"(spec hash {', '.join(sorted(tags))}), not --spec {spec} (hash {spec.hash}); "
                        "give the spec it served, or verify the endpoint that serves this one")


def _check_verified_model(served_model: str, tool_calls: dict) -> None:
    """A card must not carry the verification of another model than the one it names."""
    asked = tool_calls.get("model")
    if asked is not None and asked != served_model:
        raise CardError(f"--served-model {served_model!r} is not the model the verification asked for: `qdrift "
                        f"verify run` sent every request for model {asked!r} (--model); give --served-model "
                        f"{asked!r}, or verify {served_model!r} itself")


def reference_served(fingerprints: list[str]) -> str:
    """What the reference's answers say it served: "baseline" (a qdrift server, nothing quantized),
    "quantized" (a qdrift server under a spec) or "unknown" (no fingerprint, or another server's)."""
    tags = _served_tags(fingerprints)
    if tags is None:
        return "unknown"
    return "baseline" if tags == {"baseline"} else "quantized"


def _reference_caution(tool_calls: dict, spec: QuantSpec) -> str | None:
    """The card's warning when its verdict is not against the unquantized model (None when it is)."""
    found = tool_calls.get("reference_fingerprints") or []
    served = reference_served(found)
    if served == "baseline":
        return None
    ref = f"the reference `{tool_calls['reference']}`"
    if served == "quantized":
        tags = sorted(_served_tags(found) - {"baseline"})
        same = ", the spec of this card" if tags == [spec.hash] else ""
        what = f"{ref} served a quantized spec (hash {', '.join(tags)}{same}; system_fingerprint {', '.join(found)})"
    else:
        what = (f"{ref}'s answers do not say what it served (system_fingerprint {', '.join(found) or 'absent'}: "
                "not a qdrift server, whose answers name their spec)")
    return (f"{what}: the tool-call verdict is relative to that reference, not to the unquantized model")


def build_card(spec: QuantSpec | str, served_model: str, tool_calls: dict | None = None,
               short_form: list[dict] | None = None, long_horizon: list[dict] | None = None,
               data: list[dict] | None = None, notes: list[str] | None = None,
               created: str | None = None) -> dict:
    """A validated card from its parts (see qdrift.report.evidence for the verification parts)."""
    import qdrift

    spec = QuantSpec.parse(spec) if isinstance(spec, str) else spec
    notes = list(notes or [])
    if tool_calls is not None:
        _check_verified_model(served_model, tool_calls)
        _check_served_spec(spec, tool_calls.get("served_fingerprints") or [])
        served = reference_served(tool_calls.get("reference_fingerprints") or [])
        tool_calls = {**tool_calls, "reference_served": served}
        caution = _reference_caution(tool_calls, spec)
        if caution:
            notes.append(caution)
    if short_form and not spec.kv.is_noop:
        notes.append("short-form loglikelihood tasks run without a KV cache, so their deltas do not reflect "
                     "the KV-cache precision; generation tasks, tool calls and agent episodes do")
    card = {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "served_model": served_model,
        "spec": str(spec),
        "spec_hash": spec.hash,
        "precision": precision_of(spec),
        "verification": {"tool_calls": tool_calls, "short_form": list(short_form or []),
                         "long_horizon": list(long_horizon or [])},
        "data": list(data or []),
        "dates": {"created": created or dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                  "verified": (tool_calls or {}).get("verified")},
        "qdrift_version": qdrift.__version__,
        "notes": notes,
    }
    return validate_card(card)


def _est(e: dict | None, digits: int = 3) -> str:
    if not e or e.get("estimate") is None:
        return "-"
    text = f"{e['estimate']:+.{digits}f}" if e.get("signed") else f"{e['estimate']:.{digits}f}"
    if e.get("ci_low") is not None:
        text += f" [{e['ci_low']:.{digits}f}, {e['ci_high']:.{digits}f}]"
    return text


def _reference_line(t: dict, card: dict) -> str:
    """What the reference served, as its answers say: the verdict is relative to it."""
    ref = t.get("reference_fingerprints") or []
    if reference_served(ref) == "baseline":
        return ("The reference's answers say a qdrift server served it with nothing quantized "
                f"(system_fingerprint {', '.join(ref)}).")
    return f"**Reference:** {_reference_caution(t, QuantSpec.parse(card['spec']))}."


def _settings(rows: list[dict]) -> tuple[list[str], list[str]]:
    """(a line naming the setting every row shares, per row the setting fields that tell it apart): rows
    of one task in different settings (knobs, prompt, dtype, ...) are different measurements."""
    settings = [r.get("setting") or {} for r in rows]
    keys = sorted({k for s in settings for k in s})
    differ = [k for k in keys if len({json.dumps(s.get(k), sort_keys=True) for s in settings}) > 1]

    def text(s: dict, ks: list[str]) -> str:
        return ", ".join(f"{k} `{json.dumps(s[k], sort_keys=True)}`" if k in s else f"{k} (not set)" for k in ks)

    same = [k for k in keys if k not in differ]
    shared = [f"Setting of every row: {text(settings[0], same)}.", ""] if same else []
    return shared, [text(s, differ) for s in settings] if differ else []


def render_markdown(card: dict) -> str:
    """The human-readable card."""
    p, v = card["precision"], card["verification"]
    lines = [f"# Disclosure card: {card['served_model']}", "",
             f"**Precision:** {p['summary']}", "", f"Spec: `{card['spec']}` (hash {card['spec_hash']})", "",
             "| phase | weights | activations |", "|---|---|---|",
             f"| prefill | {p['prefill']['weights']} | {p['prefill']['activations']} |",
             f"| decode | {p['decode']['weights']} | {p['decode']['activations']} |", "",
             f"KV cache: keys {p['kv_cache']['keys']}, values {p['kv_cache']['values']}, "
             f"full-precision window {p['kv_cache']['full_precision_window']} tokens.", "", "<details><summary>Exact "
             "description</summary>", "", *[f"- {d}" for d in p["details"]], "", "</details>", "",
             "## Verification", ""]
    t = v["tool_calls"]
    if t is None:
        lines += ["Tool calls: not verified.", ""]
    else:
        analysed = ""
        if t.get("requests_analysed") is not None:
            analysed = (f" ({t['requests_analysed']} analysed: {t.get('requests_dropped') or 0} failed in some run "
                        "and are left out)")
        level = f"{100 * (1 - t.get('alpha', 0.05)):g}%"
        lines += [f"Tool calls: endpoint `{t['endpoint']}` against reference `{t['reference']}` "
                  f"({t['reference_runs']} reference runs, {t['requests']} requests{analysed}, file sha256 "
                  f"`{t['requests_sha256'][:16]}…`, margin {t.get('margin')}); verdict: **{t['conclusion']}**.", "",
                  _reference_line(t, card), "",
                  f"| measure | estimate [{level} CI] |", "|---|---|",
                  f"| validity difference vs reference | {_est(t['validity_difference'])} |",
                  f"| trigger F1 vs reference | {_est(t['trigger_f1'])} |",
                  f"| trigger F1 of reference vs itself (noise floor) | {_est(t.get('trigger_f1_floor'))} |",
                  f"| trigger agreement minus floor | {_est(t.get('trigger_agreement_minus_floor'))} |",
                  f"| schema accuracy | {_est(t['schema_accuracy'])} |", ""]
        served = t.get("served_fingerprints") or []
        if _served_tags(served) is not None:
            lines += [f"The endpoint's answers name the spec above (system_fingerprint {', '.join(served)}).", ""]
        else:
            lines += ["The precision above is as declared: the endpoint's answers do not name it (system_fingerprint "
                      f"{', '.join(served) or 'absent'}), and this comparison measures tool-call behaviour against "
                      "the reference, not precision.", ""]
    if v["short_form"]:
        shared, apart = _settings(v["short_form"])
        lines += ["Short-form benchmarks (variant minus baseline, paired):", "", *shared,
                  "| task | items | baseline | variant | delta [95% CI] |" + (" setting |" if apart else ""),
                  "|---|---|---|---|---|" + ("---|" if apart else "")]
        lines += [f"| {r['task']} | {r['items']} | {r['accuracy_baseline']:.3f} | {r['accuracy']:.3f} | "
                  f"{_est(r['delta'])} |" + (f" {apart[i]} |" if apart else "")
                  for i, r in enumerate(v["short_form"])] + [""]
    else:
        lines += ["Short-form benchmarks: none recorded.", ""]
    if v["long_horizon"]:
        shared, apart = _settings(v["long_horizon"])
        lines += ["Long-horizon agent success:", "", *shared, "| env | horizon | episodes | baseline | "
                  "success [95% CI] | delta [95% CI] |" + (" setting |" if apart else ""),
                  "|---|---|---|---|---|---|" + ("---|" if apart else "")]
        lines += [f"| {r['env']} | {r['horizon']} | {r['episodes']} | {r.get('success_baseline', float('nan')):.3f} | "
                  f"{_est(r['success'])} | {_est(r['delta'])} |" + (f" {apart[i]} |" if apart else "")
                  for i, r in enumerate(v["long_horizon"])] + [""]
    else:
        lines += ["Long-horizon success: none recorded.", ""]
    lines += ["## Provenance", "", f"Created {card['dates']['created']}"
              + (f", verified {card['dates']['verified']}" if card["dates"].get("verified") else "")
              + f", qdrift {card['qdrift_version']}, card schema {card['schema_version']}.", ""]
    lines += [f"- {d['role']}: `{d['path']}` sha256 `{d['sha256']}`" for d in card["data"]]
    said = _reference_caution(t, QuantSpec.parse(card["spec"])) if t else None  # said above, beside the verdict
    lines += [""] + [f"Note: {n}" for n in card.get("notes", []) if n != said]
    return "\n".join(lines).rstrip() + "\n"


def write_card(card: dict, out_dir: str | Path) -> tuple[Path, Path]:
    """card.json and card.md in `out_dir` (validated first)."""
    validate_card(card)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    js, md = out_dir / "card.json", out_dir / "card.md"
    js.write_text(json.dumps(card, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    md.write_text(render_markdown(card), encoding="utf-8")
    return js, md
