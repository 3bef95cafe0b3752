"""Recall and false alarms of atdp-policy's shaped detectors on values from Faker.

Faker is a generator the detectors were not written against: its phone formats, e-mail
addresses, IBANs, card numbers, SSNs and ITINs are each locale's own. Every value is put into
sentences of a few templates (with a cue word before it and without), and numbers that are
not personal (dates, times, prices, EAN and ISBN codes, postcodes, order numbers, decimals)
into the same kinds of sentences. A value counts as found when a span of its entity covers
it whole; a look-alike is a false alarm when any span of a shaped entity overlaps it.

    ~/.cache/atdp-names-venv/bin/python detect/bench/faker_shapes.py \
        --atdp-policy "$CARGO_TARGET_DIR/release/atdp-policy" [--per-locale 200] [--seed 5]
"""

import argparse
import json
import random
import subprocess
import sys
from collections import Counter

from faker import Faker

LOCALES = [
    "en_US", "en_GB", "en_CA", "en_AU", "en_IN", "de_DE", "de_AT", "de_CH", "fr_FR",
    "es_ES", "it_IT", "nl_NL", "pl_PL", "pt_BR", "pt_PT", "sv_SE", "ja_JP", "cs_CZ",
]

WITH_CUE = {
    "PHONE_NUMBER": ["Call me on {v} after six.", "Mobile: {v}", "my phone number is {v}",
                     "Tel. {v} (office)"],
    "EMAIL_ADDRESS": ["Write to {v} please.", "email: {v}"],
    "IBAN_CODE": ["IBAN {v}", "Please refund to {v}."],
    "CREDIT_CARD": ["card {v} exp 09/29", "Charge {v} for the order."],
    "US_SSN": ["SSN {v}", "social security number: {v}"],
}
WITHOUT_CUE = {
    "PHONE_NUMBER": ["Reach out at {v} tomorrow.", "{v}", "Contact | {v} | active"],
    "EMAIL_ADDRESS": ["cc {v}", '{{"contact": "{v}"}}'],
    "IBAN_CODE": ["{v}", '{{"account": "{v}"}}'],
    "CREDIT_CARD": ["{v}", '{{"pan": "{v}"}}'],
    "US_SSN": ["{v} on file", '{{"id": "{v}"}}'],
}
NEGATIVE = ["Order {v} shipped.", "{v}", "Total: {v}", "ref {v} | status open",
            "Updated at {v}.", '{{"value": "{v}"}}']
SHAPED = {"PHONE_NUMBER", "EMAIL_ADDRESS", "IBAN_CODE", "CREDIT_CARD", "US_SSN",
          "IP_ADDRESS", "URL", "SECRET"}


def values(fake: Faker, locale: str) -> list[tuple[str, str]]:
    out = [("PHONE_NUMBER", fake.phone_number()), ("EMAIL_ADDRESS", fake.email())]
    try:
        out.append(("IBAN_CODE", fake.iban()))
    except AttributeError:
        pass
    out.append(("CREDIT_CARD", fake.credit_card_number()))
    if locale == "en_US":
        out.append(("US_SSN", fake.ssn()))
        out.append(("US_SSN", fake.itin()))
    return out


def negatives(fake: Faker, rng: random.Random) -> list[tuple[str, str]]:
    return [
        ("date", fake.date()),
        ("date", fake.date(pattern="%d.%m.%Y")),
        ("date", fake.date(pattern="%d/%m/%Y")),
        ("time", fake.date_time().strftime("%Y-%m-%d %H:%M:%S")),
        ("price", f"{rng.randint(1, 99999)},{rng.randint(0, 99):02d} €"),
        ("price", f"${rng.randint(1, 9999)}.{rng.randint(0, 99):02d}"),
        ("amount", f"{rng.randint(1, 999)} {rng.randint(0, 999):03d} {rng.randint(0, 999):03d}"),
        ("ean", fake.ean13()),
        ("isbn", fake.isbn13()),
        ("postcode", fake.postcode()),
        ("order", f"{rng.randint(10**8, 10**10)}"),
        ("decimal", f"{rng.uniform(0, 10**6):.6f}"),
        ("version", f"{rng.randint(0, 20)}.{rng.randint(0, 40)}.{rng.randint(0, 200)}"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--atdp-policy", required=True)
    ap.add_argument("--per-locale", type=int, default=200)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--show-misses", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    Faker.seed(args.seed)
    rows = []
    for locale in LOCALES:
        fake = Faker(locale)
        for _ in range(args.per_locale):
            for entity, value in values(fake, locale):
                cue = rng.random() < 0.5
                template = rng.choice((WITH_CUE if cue else WITHOUT_CUE)[entity])
                rows.append({"kind": entity, "value": value, "cue": cue, "locale": locale,
                             "text": template.format(v=value)})
            for kind, value in negatives(fake, rng):
                rows.append({"kind": "negative:" + kind, "value": value, "cue": False,
                             "locale": locale, "text": rng.choice(NEGATIVE).format(v=value)})
    payload = "".join(json.dumps({"id": i, "text": r["text"]}, ensure_ascii=False) + "\n"
                      for i, r in enumerate(rows)).encode()
    proc = subprocess.run([args.atdp_policy, "scan"], input=payload, capture_output=True)
    if proc.returncode != 0:
        sys.exit(proc.stderr.decode(errors="replace"))
    spans = {}
    for line in proc.stdout.decode().splitlines():
        row = json.loads(line)
        spans[row["id"]] = row["spans"]
    found, total, alarms, shown = Counter(), Counter(), Counter(), 0
    for i, r in enumerate(rows):
        text = r["text"].encode()
        start = text.index(r["value"].encode())
        end = start + len(r["value"].encode())
        if r["kind"].startswith("negative:"):
            total[r["kind"]] += 1
            if any(s["entity"] in SHAPED and s["start"] < end and s["end"] > start
                   for s in spans[i]):
                alarms[r["kind"]] += 1
            continue
        key = (r["kind"], "cue" if r["cue"] else "no cue")
        total[key] += 1
        hit = any(s["entity"] == r["kind"] and s["start"] <= start and s["end"] >= end
                  for s in spans[i])
        found[key] += hit
        if not hit and shown < args.show_misses:
            shown += 1
            print(f"miss {r['locale']} {r['kind']}: {r['text']!r}", file=sys.stderr)
    print(f"Faker {Faker.__module__ and __import__('faker').VERSION}, {len(LOCALES)} locales, "
          f"{args.per_locale} per locale, seed {args.seed}\n")
    print("| entity | context | values | found | recall |\n|---|---|--:|--:|--:|")
    for key in sorted(k for k in total if isinstance(k, tuple)):
        print(f"| {key[0]} | {key[1]} | {total[key]:,} | {found[key]:,} | "
              f"{found[key] / total[key]:.3f} |")
    print("\n| look-alike | texts | false alarms |\n|---|--:|--:|")
    for key in sorted(k for k in total if isinstance(k, str)):
        print(f"| {key.removeprefix('negative:')} | {total[key]:,} | {alarms[key]:,} |")


if __name__ == "__main__":
    main()
