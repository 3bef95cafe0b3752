#!/usr/bin/env python3
"""Compare atdp-policy's detectors with Microsoft Presidio's regex recognizers.

Generates a deterministic corpus of agent traffic (support/ops prose, JSON tool calls and
results, log lines) with personal data and secrets inserted at known UTF-8 byte offsets, plus
look-alikes that must not be reported (versions, UUIDs, git hashes, order numbers, dates,
timestamps, Luhn-invalid 16-digit numbers, URLs without credentials). Then:

- runs `atdp-policy scan` on it (one subprocess; JSON Lines in and out);
- runs Presidio's predefined pattern recognizers directly, without an NLP engine (no spaCy
  model), the way `AnalyzerEngine` would merge their results (score threshold, then
  `remove_duplicates`);
- scores both against the truth: precision, recall and F1 per entity and overall, with
  overlap matching and with exact boundaries; and their throughput.

Prints Markdown to stdout. Usage (see scripts/bench-presidio, which also builds the binary):

    python compare_presidio.py --atdp-policy target/release/atdp-policy [--texts 2000]
        [--seed 7] [--out corpus.jsonl] [--presidio-threshold 0.5] [--show-errors [N]]

Only the standard library and presidio-analyzer (detect/bench/requirements.txt).
"""

from __future__ import annotations

import argparse
import ipaddress
import itertools
import json
import os
import random
import re
import string
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable

# Presidio's entity names; SECRET is atdp's own (Presidio has no recognizer for it).
ENTITIES = [
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "CREDIT_CARD",
    "US_SSN",
    "IBAN_CODE",
    "IP_ADDRESS",
    "URL",
    "SECRET",
]
PRESIDIO_UNSUPPORTED = {"SECRET"}

# Relative frequency of each entity among inserted values.
ENTITY_WEIGHTS = {
    "EMAIL_ADDRESS": 3,
    "PHONE_NUMBER": 3,
    "CREDIT_CARD": 2,
    "US_SSN": 2,
    "IBAN_CODE": 2,
    "IP_ADDRESS": 2,
    "URL": 1.5,
    "SECRET": 2,
}

# ---------------------------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------------------------

FIRST = """James Mary Robert Patricia John Jennifer Michael Linda David Elizabeth William Barbara
Richard Susan Joseph Jessica Thomas Sarah Charles Karen Priya Arjun Wei Mei Hiroshi Yuki Olga
Dmitri Fatima Omar Aisha Mohammed Sofia Lucas Emma Noah Mia Liam Chloe Mateo Valentina Lars
Ingrid Sven Astrid Pierre Camille Hans Greta Jürgen Zoë Renée José Ana Tomasz Agnieszka Kofi
Amara Chen Siobhan Declan Nguyen Thanh""".split()
LAST = """Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez Lopez
Wilson Anderson Taylor Thomas Moore Jackson Martin Lee Thompson White Harris Clark Lewis Walker
Patel Sharma Kumar Wang Zhang Tanaka Suzuki Ivanova Petrov Haddad Khan Rossi Bianchi Schmidt
Schneider Fischer Weber Dubois Laurent Moreau Novak Kowalski Nowak Andersson Johansson Nielsen
OConnor Murphy Kelly Okafor Mensah Silva Santos Costa""".split()
# Names for email local parts must be ASCII (the corpus keeps addresses ASCII).
ASCII_FIRST = [n for n in FIRST if n.isascii()]
CITIES = """London Paris Berlin Madrid Lisbon Dublin Amsterdam Zürich Genève Malmö Kraków Köln
München Montréal Québec São_Paulo Reykjavík Tórshavn Austin Seattle Boston Denver Chicago
Toronto Sydney Auckland Singapore Nairobi Lagos Mumbai Bengaluru Osaka Seoul""".split()
CITIES = [c.replace("_", " ") for c in CITIES]
PRODUCTS = ["laptop stand", "noise-cancelling headphones", "espresso machine", "café table",
            "standing desk", "ergonomic chair", "USB-C dock", "mechanical keyboard", "4K monitor",
            "router", "smart thermostat", "office chair", "coffee grinder", "water filter",
            "backpack", "phone case", "wireless charger", "label printer", "webcam",
            "annual subscription", "Pro plan", "Team plan", "gift card", "extended warranty",
            "spare battery"]
TEAMS = ["billing", "support", "logistics", "payments", "fraud", "SRE", "platform", "identity",
         "customer success", "returns", "data", "security"]
SERVICES = ["api-gateway", "orders-svc", "billing-worker", "payments-api", "auth-service",
            "search-indexer", "notification-svc", "inventory", "checkout", "ledger",
            "shipping-adapter", "crm-sync"]
STATUSES = ["shipped", "pending", "refunded", "on hold", "delivered", "cancelled", "escalated",
            "awaiting payment", "in transit", "resolved"]
LOCALES = ["en-US", "en-GB", "de-DE", "fr-FR", "de-CH", "fr-CA", "pt-BR", "es-ES", "ja-JP"]
ADVERBS = ["yesterday", "this morning", "last week", "on Monday", "twice", "again", "overnight",
           "after the outage", "before the weekend", "as requested", "déjà vu style"]
ADJS = ["urgent", "minor", "recurring", "intermittent", "critical", "cosmetic", "naïve",
        "known", "new", "stale"]
CURRENCIES = ["$", "€", "£", "CHF ", "¥"]
DOMAIN_WORDS = """acme globex initech umbrella hooli vandelay stark wayne wonka tyrell cyberdyne
soylent oscorp dunder massive northwind contoso fabrikam tailspin adventure-works blue-yonder
lumen orbit nimbus quanta vertex pinecone bluebird redwood harbor""".split()
TLDS = ["com", "io", "co.uk", "de", "fr", "net", "org", "ch", "dev", "app", "eu", "co"]
FREEMAIL = ["gmail.com", "outlook.com", "proton.me", "yahoo.co.uk", "gmx.de", "web.de",
            "icloud.com", "hotmail.fr", "fastmail.com"]
US_AREAS = ["212", "305", "312", "415", "503", "512", "602", "617", "646", "702", "718", "206",
            "303", "404", "470", "510", "650", "713", "737", "801", "919", "972"]
GB_BANKS = ["NWBK", "BARC", "LOYD", "HBUK", "MIDL", "WEST", "CITI", "MONZ"]
ALNUM = string.ascii_letters + string.digits
UPPER_ALNUM = string.ascii_uppercase + string.digits
TOOLS_GENERIC = ["lookup_order", "update_ticket", "create_case", "get_customer", "search_kb",
                 "send_message", "log_event"]


# ---------------------------------------------------------------------------------------------
# Value generators: each returns the value, and text that goes just before and after it
# (e.g. the port after an IP address), which is not part of the truth span.
# ---------------------------------------------------------------------------------------------


@dataclass
class Value:
    text: str
    before: str = ""
    after: str = ""


def rand_str(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def rand_digits(rng: random.Random, n: int) -> str:
    return rand_str(rng, string.digits, n)


def company_domain(rng: random.Random) -> str:
    word = rng.choice(DOMAIN_WORDS)
    if rng.random() < 0.3:
        word += rng.choice(["-labs", "-corp", "hq", "-group", "-eu", "shop"])
    if rng.random() < 0.25:
        word = rng.choice(["mail", "support", "eu", "corp", "us"]) + "." + word
    return f"{word}.{rng.choice(TLDS)}"


def gen_email(rng: random.Random) -> Value:
    first = rng.choice(ASCII_FIRST).lower()
    last = rng.choice(LAST).lower()
    local = rng.choice(
        [
            f"{first}.{last}",
            f"{first[0]}{last}",
            f"{first}_{last}",
            f"{first}{rng.randint(1, 99)}",
            f"{first}.{last}+{rng.choice(['orders', 'news', 'shop', 'work'])}",
            f"{last}.{first[0]}",
            f"{first}-{last}{rng.randint(1970, 2005)}",
            rng.choice(["support", "billing", "accounts", "ops", "noreply", "hr"]),
        ]
    )
    domain = rng.choice(FREEMAIL) if rng.random() < 0.4 else company_domain(rng)
    email = f"{local}@{domain}"
    if rng.random() < 0.05:
        email = email.title()
    return Value(email)


def gen_phone(rng: random.Random) -> Value:
    kind = rng.randrange(10)
    us = (rng.choice(US_AREAS), str(rng.randint(201, 989)), rand_digits(rng, 4))
    if us[1].endswith("11"):
        us = (us[0], "555", "01" + rand_digits(rng, 2))
    if kind == 0:  # UK, Ofcom drama range (London)
        return Value(f"+44 20 7946 0{rand_digits(rng, 3)}")
    if kind == 1:  # UK, London or mobile, various spacing
        return Value(
            rng.choice(
                [
                    f"+44 20 7{rand_digits(rng, 3)} {rand_digits(rng, 4)}",
                    f"+44 7700 900{rand_digits(rng, 3)}",
                    f"+44 (0)20 7946 0{rand_digits(rng, 3)}",
                ]
            )
        )
    if kind == 2:  # US, international format
        sep = rng.choice([" ", " ", "-", "."])
        return Value(f"+1{sep}{us[0]}{sep}{us[1]}{sep}{us[2]}")
    if kind == 3:  # US, fictional 555-01xx
        return Value(f"+1 {rng.choice(US_AREAS)} 555 01{rand_digits(rng, 2)}")
    if kind == 4:  # US national (415) 555-0132
        return Value(f"({us[0]}) {us[1]}-{us[2]}")
    if kind == 5:  # US national 415-555-0132
        return Value(f"{us[0]}-{us[1]}-{us[2]}")
    if kind == 6:  # Germany
        return Value(
            rng.choice(
                [
                    f"+49 30 {rng.randint(2, 9)}{rand_digits(rng, 7)}",
                    f"+49 151 {rng.randint(1, 9)}{rand_digits(rng, 7)}",
                    f"+49 89 {rng.randint(2, 9)}{rand_digits(rng, 6)}",
                ]
            )
        )
    if kind == 8:  # European national formats with a trunk 0 (atdp needs a context word)
        return Value(
            rng.choice(
                [
                    f"020 7946 0{rand_digits(rng, 3)}",
                    f"0{rng.choice('67')} " + " ".join(rand_digits(rng, 2) for _ in range(4)),
                    f"030 {rng.randint(2, 9)}{rand_digits(rng, 6)}",
                ]
            )
        )
    # France, mobile in pairs
    return Value(f"+33 {rng.choice('67')} " + " ".join(rand_digits(rng, 2) for _ in range(4)))


def luhn_check_digit(payload: str) -> str:
    """The digit that makes payload + digit pass the Luhn check."""
    total = 0
    for i, ch in enumerate(reversed(payload)):
        d = int(ch)
        if i % 2 == 0:  # these get doubled once the check digit is appended
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return str((10 - total % 10) % 10)


def group_digits(digits: str, sizes: list[int], sep: str) -> str:
    out, i = [], 0
    for size in sizes:
        out.append(digits[i : i + size])
        i += size
    return sep.join(out)


def card_number(rng: random.Random, valid: bool) -> tuple[str, list[int]]:
    """A card-like number (Visa, Mastercard, Amex, Discover) and its usual grouping."""
    brand = rng.choice(["visa", "visa", "mc", "mc2", "amex", "discover"])
    if brand == "amex":
        prefix, length, sizes = rng.choice(["34", "37"]), 15, [4, 6, 5]
    elif brand == "visa":
        prefix, length, sizes = "4", 16, [4, 4, 4, 4]
    elif brand == "mc":
        prefix, length, sizes = str(rng.randint(51, 55)), 16, [4, 4, 4, 4]
    elif brand == "mc2":
        prefix, length, sizes = str(rng.randint(2221, 2720)), 16, [4, 4, 4, 4]
    else:
        prefix, length, sizes = rng.choice(["6011", "65"]), 16, [4, 4, 4, 4]
    payload = prefix + rand_digits(rng, length - len(prefix) - 1)
    check = luhn_check_digit(payload)
    if not valid:
        check = str((int(check) + rng.randint(1, 9)) % 10)
    return payload + check, sizes


def format_card(rng: random.Random, digits: str, sizes: list[int]) -> str:
    style = rng.choice(["plain", "space", "space", "dash"])
    if style == "plain":
        return digits
    return group_digits(digits, sizes, " " if style == "space" else "-")


def gen_credit_card(rng: random.Random) -> Value:
    digits, sizes = card_number(rng, valid=True)
    return Value(format_card(rng, digits, sizes))


def gen_ssn(rng: random.Random) -> Value:
    while True:
        area = rng.randint(1, 899)
        group = rng.randint(1, 99)
        serial = rng.randint(1, 9999)
        ssn = f"{area:03d}-{group:02d}-{serial:04d}"
        digits = ssn.replace("-", "")
        if area != 666 and len(set(digits)) > 1 and ssn not in (
            "078-05-1120",
            "219-09-9999",
            "123-45-6789",
        ):
            return Value(ssn)


def iban_check_digits(country: str, bban: str) -> str:
    rearranged = bban + country + "00"
    number = int("".join(str(int(c, 36)) for c in rearranged))
    return f"{98 - number % 97:02d}"


def rib_key(bank: str, branch: str, account: str) -> str:
    """French RIB key (letters in the account map to digits per the RIB table)."""
    table = {c: str((i % 9) + 1) for i, c in enumerate(string.ascii_uppercase)}
    table.update({"S": "2", "T": "3", "U": "4", "V": "5", "W": "6", "X": "7", "Y": "8",
                  "Z": "9"})
    acct = "".join(table.get(c, c) for c in account)
    return f"{97 - (89 * int(bank) + 15 * int(branch) + 3 * int(acct)) % 97:02d}"


def gen_iban(rng: random.Random) -> Value:
    country = rng.choice(["DE", "GB", "FR"])
    if country == "DE":  # 8-digit bank code + 10-digit account: 22 chars
        bban = rand_digits(rng, 8) + rand_digits(rng, 10)
    elif country == "GB":  # bank + sort code + account: 22 chars
        bban = rng.choice(GB_BANKS) + rand_digits(rng, 6) + rand_digits(rng, 8)
    else:  # bank + branch + 11-char account + RIB key: 27 chars
        bank, branch = rand_digits(rng, 5), rand_digits(rng, 5)
        account = rand_digits(rng, 11)
        if rng.random() < 0.2:
            account = account[:8] + rand_str(rng, string.ascii_uppercase, 1) + account[9:]
        bban = bank + branch + account + rib_key(bank, branch, account)
    iban = country + iban_check_digits(country, bban) + bban
    if rng.random() < 0.5:  # paper format: groups of four
        iban = " ".join(iban[i : i + 4] for i in range(0, len(iban), 4))
    return Value(iban)


def gen_ip(rng: random.Random) -> Value:
    kind = rng.randrange(6)
    if kind <= 2:  # IPv4: private, documentation, public-looking
        addr = rng.choice(
            [
                f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
                f"192.168.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
                f"172.{rng.randint(16, 31)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
                f"203.0.113.{rng.randint(1, 254)}",
                f"198.51.100.{rng.randint(1, 254)}",
                f"{rng.randint(11, 223)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}."
                f"{rng.randint(1, 254)}",
            ]
        )
        if kind == 2:  # host:port
            return Value(addr, after=f":{rng.choice([22, 443, 5432, 6379, 8080, 9092])}")
        return Value(addr)
    if kind == 3:  # IPv6, compressed global or documentation
        prefix = rng.choice([0x20010DB8, 0x2A0104F8, 0x26001F18, 0x2A031B20])
        n = (prefix << 96) | rng.getrandbits(64)  # middle 32 bits zero: compresses to ::
        return Value(ipaddress.IPv6Address(n).compressed)
    if kind == 4:  # IPv6 link-local / full form
        if rng.random() < 0.5:
            return Value(str(ipaddress.IPv6Address((0xFE80 << 112) | rng.getrandbits(64))))
        return Value(ipaddress.IPv6Address((0x2001 << 112) | rng.getrandbits(112)).exploded)
    # IPv6 in brackets with a port, as in URLs and logs
    n = (0x20010DB8 << 96) | rng.getrandbits(16)
    port = rng.choice([443, 8443])
    return Value(ipaddress.IPv6Address(n).compressed, before="[", after=f"]:{port}")


def gen_cred_url(rng: random.Random) -> Value:
    scheme = rng.choice(["https", "https", "postgres", "postgresql", "mysql", "amqp", "redis",
                         "mongodb+srv", "ftp"])
    user = rng.choice(
        [
            rng.choice(ASCII_FIRST).lower(),
            "admin",
            "deploy",
            "svc_" + rng.choice(["orders", "billing", "etl", "crm"]),
            "app_user",
            "ci-bot",
        ]
    )
    password = rand_str(rng, ALNUM, rng.randint(8, 20))
    if rng.random() < 0.3:
        password = password[:4] + rng.choice("-_.") + password[4:]
    host = rng.choice(
        [
            f"db-{rng.randint(1, 9)}.internal",
            f"{rng.choice(SERVICES)}.{company_domain(rng)}",
            f"{rng.choice(['mq', 'cache', 'ftp', 'api'])}.{company_domain(rng)}",
            f"cluster0.{rand_str(rng, string.ascii_lowercase + string.digits, 5)}.mongodb.net",
        ]
    )
    port = {"postgres": 5432, "postgresql": 5432, "mysql": 3306, "amqp": 5672, "redis": 6379}
    if scheme in port and rng.random() < 0.7:
        host += f":{port[scheme]}"
    path = rng.choice(["", "/", "/orders", "/v1/hooks/ingest", "/prod?sslmode=require", "/0",
                       "/exports/2026/report.csv"])
    return Value(f"{scheme}://{user}:{password}@{host}{path}")


def gen_secret(rng: random.Random) -> Value:
    kind = rng.randrange(8)
    if kind == 0:
        return Value("sk-proj-" + rand_str(rng, ALNUM, 40))
    if kind == 1:
        return Value("AKIA" + rand_str(rng, UPPER_ALNUM, 16))
    if kind == 2:
        return Value("ghp_" + rand_str(rng, ALNUM, 36))
    if kind == 3:
        return Value(
            f"xoxb-{rand_digits(rng, 12)}-{rand_digits(rng, 13)}-{rand_str(rng, ALNUM, 24)}"
        )
    if kind == 4:
        return Value(rng.choice(["sk_live_", "rk_live_", "sk_test_"]) + rand_str(rng, ALNUM, 24))
    if kind == 5:
        return Value("AIza" + rand_str(rng, ALNUM + "-_", 35))
    if kind == 6:
        return Value("glpat-" + rand_str(rng, ALNUM + "-_", 20))
    return Value("sk-ant-api03-" + rand_str(rng, ALNUM + "-_", 80))


VALUE_GENERATORS: dict[str, Callable[[random.Random], Value]] = {
    "EMAIL_ADDRESS": gen_email,
    "PHONE_NUMBER": gen_phone,
    "CREDIT_CARD": gen_credit_card,
    "US_SSN": gen_ssn,
    "IBAN_CODE": gen_iban,
    "IP_ADDRESS": gen_ip,
    "URL": gen_cred_url,
    "SECRET": gen_secret,
}

# ---------------------------------------------------------------------------------------------
# Look-alike generators (decoys): must not be reported.
# ---------------------------------------------------------------------------------------------


def rand_date(rng: random.Random) -> tuple[int, int, int]:
    return rng.randint(2019, 2027), rng.randint(1, 12), rng.randint(1, 28)


def gen_version(rng: random.Random) -> str:
    a, b, c = rng.randint(0, 20), rng.randint(0, 40), rng.randint(0, 99)
    return rng.choice(
        [f"{a}.{b}.{c}", f"v{a}.{b}.{c}", f"v{a}.{b}.{c}.{rng.randint(0, 999)}",
         f"{a}.{b}.{c}-rc.{rng.randint(1, 5)}"]
    )


def gen_uuid(rng: random.Random) -> str:
    value = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    return value.upper() if rng.random() < 0.1 else value


def gen_sha(rng: random.Random) -> str:
    return rand_str(rng, "0123456789abcdef", 40 if rng.random() < 0.7 else rng.randint(7, 12))


def gen_order(rng: random.Random) -> str:
    return rng.choice(
        [
            f"SO-{rng.randint(10000, 99999)}",
            f"#{rng.randint(1000000, 9999999)}",
            f"PO-{rng.randint(2019, 2027)}-{rng.randint(0, 999999):06d}",
            f"INV-{rng.randint(10000, 999999)}",
            f"RMA{rng.randint(100000, 999999)}",
        ]
    )


def gen_date(rng: random.Random) -> str:
    y, m, d = rand_date(rng)
    return rng.choice([f"{y}-{m:02d}-{d:02d}", f"{d:02d}/{m:02d}/{y}", f"{m:02d}/{d:02d}/{y}",
                       f"{d:02d}.{m:02d}.{y}"])


def gen_timestamp(rng: random.Random) -> str:
    y, m, d = rand_date(rng)
    hh, mm, ss = rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59)
    epoch = rng.randint(1_550_000_000, 1_800_000_000)
    return rng.choice(
        [
            f"{y}-{m:02d}-{d:02d}T{hh:02d}:{mm:02d}:{ss:02d}Z",
            f"{y}-{m:02d}-{d:02d}T{hh:02d}:{mm:02d}:{ss:02d}.{rng.randint(0, 999):03d}+01:00",
            f"{y}-{m:02d}-{d:02d} {hh:02d}:{mm:02d}:{ss:02d}",
            f"{hh:02d}:{mm:02d}:{ss:02d}",
            str(epoch),
            str(epoch * 1000 + rng.randint(0, 999)),
        ]
    )


def gen_luhn_invalid(rng: random.Random) -> str:
    digits, sizes = card_number(rng, valid=False)
    return format_card(rng, digits, sizes)


def gen_plain_url(rng: random.Random) -> str:
    return rng.choice(
        [
            f"https://status.{company_domain(rng)}/incidents/{rng.randint(100, 9999)}",
            f"https://docs.{company_domain(rng)}/api/v2/orders?limit={rng.randint(10, 100)}",
            f"http://localhost:{rng.choice([3000, 8000, 8080])}/health",
            f"https://{company_domain(rng)}/help/returns",
            f"https://github.com/{rng.choice(DOMAIN_WORDS)}/{rng.choice(SERVICES)}/pull/"
            f"{rng.randint(10, 9000)}",
            f"www.{company_domain(rng)}",
        ]
    )


DECOY_GENERATORS: dict[str, Callable[[random.Random], str]] = {
    "version": gen_version,
    "uuid": gen_uuid,
    "sha": gen_sha,
    "order": gen_order,
    "date": gen_date,
    "timestamp": gen_timestamp,
    "luhn_invalid": gen_luhn_invalid,
    "plain_url": gen_plain_url,
}

# ---------------------------------------------------------------------------------------------
# Templates. `<<@>>` is the inserted value (PII or look-alike); `<<key>>`/`<<tool>>` a JSON key
# and tool name suited to it; `<<version>>`, `<<uuid>>`, … (any DECOY_GENERATORS name) an extra
# tracked look-alike; other `<<word>>`s are plain filler (FILLERS).
# ---------------------------------------------------------------------------------------------

FILLERS: dict[str, Callable[[random.Random], str]] = {
    "Name": lambda r: r.choice(FIRST),
    "last": lambda r: r.choice(LAST),
    "city": lambda r: r.choice(CITIES),
    "product": lambda r: r.choice(PRODUCTS),
    "team": lambda r: r.choice(TEAMS),
    "service": lambda r: r.choice(SERVICES),
    "status": lambda r: r.choice(STATUSES),
    "locale": lambda r: r.choice(LOCALES),
    "adverb": lambda r: r.choice(ADVERBS),
    "adj": lambda r: r.choice(ADJS),
    "n": lambda r: str(r.randint(2, 48)),
    "ms": lambda r: str(r.randint(3, 2500)),
    "amount": lambda r: f"{r.choice(CURRENCIES)}{r.randint(5, 2999)}.{r.randint(0, 99):02d}",
    "callid": lambda r: rand_str(r, ALNUM, 24),
    "level": lambda r: r.choice(["INFO", "INFO", "WARN", "ERROR", "DEBUG"]),
}

FILLER_SENTENCES = [
    "Thanks for reaching out about the <<product>>.",
    "<<Name>> from <<team>> confirmed the refund of <<amount>> <<adverb>>.",
    "The customer in <<city>> says the <<product>> arrived damaged; a replacement is on its way.",
    "I have escalated this to the <<team>> team and will update the ticket by end of day.",
    "Order <<order>> is currently <<status>>.",
    "Could you confirm the delivery address before we ship the <<product>>?",
    "We reproduced the <<adj>> issue on <<service>> after deploying <<version>>.",
    "Latency on <<service>> went up to <<ms>> ms at <<timestamp>> and recovered within minutes.",
    "Per our policy, returns are accepted within <<n>> days of delivery.",
    "The invoice total was <<amount>>, including VAT.",
    "<<Name>> <<last>> asked whether the café discount applies to the <<product>> as well.",
    "Rolled back <<service>> to <<version>> (commit <<sha>>) while we investigate.",
    "Summary: <<n>> tickets reopened, <<n>> resolved, none escalated.",
    "The shipment left our warehouse in <<city>> on <<date>>.",
    "Please don't share passwords or card details in this chat.",
    "We apologise for the delay — the carrier reports heavy volume this week.",
    "Request <<uuid>> failed with a timeout after <<ms>> ms.",
    "<<Name>> noted that the <<adj>> bug only shows up with the <<locale>> locale.",
    "Your <<product>> qualifies for free repair under the extended warranty.",
    "Reminder: the maintenance window starts at <<timestamp>>.",
    "The agent called get_order_status and lookup_customer before answering.",
    "Customer prefers email over phone for follow-ups.",
    "Tracking shows the parcel is <<status>>; expected delivery <<date>>.",
    "Deployed <<service>> <<version>> to production in <<city>>.",
    "Our records show <<n>> previous orders on this account.",
    "Könnten Sie bitte die Rechnung für den <<product>> erneut senden?",
    "The résumé upload on the careers page fails with a 413 error.",
    "Escalation note: customer is unhappy with the façade of the new store in <<city>>.",
    "Issue <<order>> was merged into the earlier report from <<Name>>.",
    "We will refund <<amount>> to the original payment method within <<n>> business days.",
    "Nightly job finished at <<timestamp>>; <<n>> records skipped.",
    "The <<team>> dashboard is green again after the fix in <<sha>>.",
]

PROSE: dict[str, list[str]] = {
    "EMAIL_ADDRESS": [
        "Please send the confirmation to <<@>>.",
        "Customer email: <<@>>",
        "You can reach <<Name>> at <<@>> for anything billing related.",
        "From: <<Name>> <<last>> <<<@>>>",
        "I changed my address to <<@>>, please update the account.",
        "cc <<@>> on the reply.",
        "The ticket was opened by <<@>> (<<city>>).",
        "Bounce for <<@>>: mailbox full.",
    ],
    "PHONE_NUMBER": [
        "Please call me back at <<@>>.",
        "My number is <<@>> if the courier needs it.",
        "Reach <<Name>> on <<@>> after 5pm <<city>> time.",
        "Customer left a voicemail from <<@>>.",
        "Contact: <<Name>> <<last>>, <<@>>",
        "Delivery note: ring <<@>> on arrival.",
        "The number on file, <<@>>, is no longer in service.",
        "SMS sent to <<@>> with the pickup code.",
        "<<Name>> <<last>> — <<@>> — <<city>>",
    ],
    "CREDIT_CARD": [
        "The card ending in the number <<@>> was declined.",
        "Customer read out their card number <<@>> over chat.",
        "Payment method: <<@>> exp 09/28.",
        "Please charge <<@>> for the remaining <<amount>>.",
        "Refund issued to <<@>>.",
        "He pasted <<@>> into the notes field, please redact.",
    ],
    "US_SSN": [
        "SSN on the application: <<@>>.",
        "The customer provided their social security number <<@>> for verification.",
        "Tax form lists <<@>> for <<Name>> <<last>>.",
        "Identity check passed with <<@>>.",
        "Please do not store <<@>> in the CRM.",
    ],
    "IBAN_CODE": [
        "Please refund to IBAN <<@>>.",
        "New payout account: <<@>> (<<Name>> <<last>>).",
        "Bank details: <<@>>, BIC on file.",
        "Transfer of <<amount>> to <<@>> is pending.",
        "The supplier in <<city>> changed their account to <<@>>.",
    ],
    "IP_ADDRESS": [
        "Login from <<@>> was blocked by the WAF.",
        "The health check on <<@>> timed out after <<ms>> ms.",
        "Customer's IP was <<@>> when the order was placed.",
        "Please whitelist <<@>> for the partner integration.",
        "<<timestamp>> <<level>> <<service>> connection from <<@>> refused",
        "<<timestamp>> <<level>> <<service>> upstream <<@>> returned 502 in <<ms>>ms",
        "Traffic spike from <<@>> at <<timestamp>>.",
    ],
    "URL": [
        "The connection string in the config is <<@>>",
        "DATABASE_URL=<<@>>",
        "Webhook target set to <<@>> by <<Name>>.",
        "<<timestamp>> <<level>> <<service>> connecting to <<@>>",
        "Someone pasted <<@>> into the support chat.",
        "Broker URL: <<@>>",
    ],
    "SECRET": [
        "export OPENAI_API_KEY=<<@>>",
        "Authorization: Bearer <<@>>",
        "The key <<@>> was found in a public gist and has been revoked.",
        "Rotated the credential <<@>> used by <<service>>.",
        "Here is my key <<@>> can you check why it fails?",
        "<<timestamp>> <<level>> <<service>> auth failed for <<@>>",
        "Put <<@>> in the vault, not in the repo.",
    ],
    "version": [
        "Please upgrade the SDK to <<@>>.",
        "<<service>> <<@>> is now live.",
        "Bug only reproduces on firmware <<@>>.",
        "Release notes for <<@>> are attached.",
    ],
    "uuid": [
        "Correlation id <<@>>.",
        "Session <<@>> expired.",
        "See trace <<@>> for details.",
        "Idempotency key <<@>> was reused.",
    ],
    "sha": [
        "Fixed in <<@>>.",
        "Bisected the regression to commit <<@>>.",
        "Build <<@>> passed all checks.",
    ],
    "order": [
        "Order <<@>> was split into two shipments.",
        "Refund for <<@>> approved.",
        "Customer asked about <<@>> again.",
        "Re: your order <<@>>",
    ],
    "date": [
        "Delivery is scheduled for <<@>>.",
        "Contract renews on <<@>>.",
        "Invoice dated <<@>> is overdue.",
        "Warranty valid until <<@>>.",
    ],
    "timestamp": [
        "Last login at <<@>>.",
        "Event received <<@>>.",
        "The job started at <<@>> and is still running.",
        "<<@>> <<level>> <<service>> request completed in <<ms>>ms",
    ],
    "luhn_invalid": [
        "Tracking number <<@>>.",
        "Reference <<@>> on the bank statement.",
        "Gift card serial <<@>> could not be activated.",
        "Invoice number <<@>> is missing from the ledger.",
    ],
    "plain_url": [
        "See <<@>> for the status page.",
        "The docs at <<@>> explain the limits.",
        "Returns can be started at <<@>>",
        "Link: <<@>>",
    ],
}

# JSON keys and tool names that fit each kind of value.
KEYS: dict[str, list[str]] = {
    "EMAIL_ADDRESS": ["email", "customer_email", "to", "reply_to", "contact"],
    "PHONE_NUMBER": ["phone", "mobile", "to", "callback_number", "contact_phone"],
    "CREDIT_CARD": ["card_number", "pan", "payment_card", "card"],
    "US_SSN": ["ssn", "tax_id", "social_security_number"],
    "IBAN_CODE": ["iban", "payout_account", "account", "bank_account"],
    "IP_ADDRESS": ["client_ip", "source_ip", "remote_addr", "host", "peer"],
    "URL": ["dsn", "database_url", "connection_string", "broker_url", "webhook_url"],
    "SECRET": ["api_key", "token", "access_token", "secret", "credential"],
    "version": ["version", "sdk_version", "app_version", "firmware"],
    "uuid": ["request_id", "trace_id", "session_id", "idempotency_key"],
    "sha": ["commit", "sha", "revision"],
    "order": ["order_ref", "order_id", "invoice", "rma"],
    "date": ["date", "delivery_date", "due", "renewal_date"],
    "timestamp": ["created_at", "ts", "timestamp", "updated_at"],
    "luhn_invalid": ["tracking_number", "reference", "serial", "invoice_no"],
    "plain_url": ["url", "callback_url", "docs", "status_page"],
}
TOOLS: dict[str, list[str]] = {
    "EMAIL_ADDRESS": ["send_email", "lookup_customer", "update_contact"],
    "PHONE_NUMBER": ["send_sms", "schedule_callback", "update_contact"],
    "CREDIT_CARD": ["charge_card", "tokenize_card", "refund_payment"],
    "US_SSN": ["verify_identity", "run_credit_check"],
    "IBAN_CODE": ["create_payout", "refund_to_bank", "verify_account"],
    "IP_ADDRESS": ["block_ip", "geo_lookup", "check_health"],
    "URL": ["configure_connector", "test_connection", "register_webhook"],
    "SECRET": ["set_credentials", "call_api", "rotate_key"],
}

JSON_TEMPLATES = [
    r'{"name":"<<tool>>","arguments":"{\"<<key>>\":\"<<@>>\"}"}',
    r'{"name":"<<tool>>","arguments":"{\"order_ref\":\"<<order>>\",\"<<key>>\":\"<<@>>\",'
    r'\"notify\":true}"}',
    r'{"type":"function_call","call_id":"call_<<callid>>","name":"<<tool>>",'
    r'"arguments":"{\"<<key>>\":\"<<@>>\",\"locale\":\"<<locale>>\"}"}',
    r'{"role":"tool","tool_call_id":"call_<<callid>>","content":"{\"status\":\"ok\",'
    r'\"<<key>>\":\"<<@>>\",\"updated_at\":\"<<timestamp>>\"}"}',
    r'{"<<key>>": "<<@>>", "customer": "<<Name>> <<last>>", "city": "<<city>>"}',
    r'{"input":{"<<key>>":"<<@>>"},"request_id":"<<uuid>>"}',
    r'{"tool":"<<tool>>","args":{"<<key>>":"<<@>>","limit":<<n>>},"trace_id":"<<uuid>>"}',
]
# Benign JSON without a slot (tool calls that carry nothing sensitive).
JSON_FILLERS = [
    r'{"name":"lookup_order","arguments":"{\"order_ref\":\"<<order>>\",\"limit\":<<n>>}"}',
    r'{"name":"search_kb","arguments":"{\"query\":\"return policy <<product>>\",'
    r'\"locale\":\"<<locale>>\"}"}',
    r'{"role":"tool","tool_call_id":"call_<<callid>>","content":"{\"status\":\"<<status>>\",'
    r'\"eta\":\"<<date>>\"}"}',
    r'{"event":"deploy","service":"<<service>>","version":"<<version>>","commit":"<<sha>>",'
    r'"at":"<<timestamp>>"}',
    r'{"name":"get_weather","arguments":"{\"city\":\"<<city>>\",\"units\":\"metric\"}"}',
]

TOKEN_RE = re.compile(r"<<(@|\w+)>>")


# ---------------------------------------------------------------------------------------------
# Corpus builder: appends pieces and keeps the byte offset, so truth spans are exact.
# ---------------------------------------------------------------------------------------------


@dataclass
class TextBuilder:
    parts: list[str] = field(default_factory=list)
    pos: int = 0  # UTF-8 bytes written so far
    truth: list[dict] = field(default_factory=list)
    decoys: list[dict] = field(default_factory=list)

    def add(self, s: str) -> None:
        self.parts.append(s)
        self.pos += len(s.encode("utf-8"))

    def add_marked(self, s: str, into: list[dict], label_key: str, label: str) -> None:
        start = self.pos
        self.add(s)
        into.append({"start": start, "end": self.pos, label_key: label})

    def text(self) -> str:
        return "".join(self.parts)


def render(b: TextBuilder, rng: random.Random, template: str, slot: str | None) -> None:
    """Appends `template`, with its slot filled by a fresh value of kind `slot`."""
    pos = 0
    for m in TOKEN_RE.finditer(template):
        b.add(template[pos : m.start()])
        name = m.group(1)
        if name == "@":
            assert slot is not None
            if slot in VALUE_GENERATORS:
                value = VALUE_GENERATORS[slot](rng)
                b.add(value.before)
                b.add_marked(value.text, b.truth, "entity", slot)
                b.add(value.after)
            else:
                b.add_marked(DECOY_GENERATORS[slot](rng), b.decoys, "kind", slot)
        elif name == "key":
            b.add(rng.choice(KEYS[slot]))
        elif name == "tool":
            b.add(rng.choice(TOOLS.get(slot, TOOLS_GENERIC)))
        elif name in DECOY_GENERATORS:
            b.add_marked(DECOY_GENERATORS[name](rng), b.decoys, "kind", name)
        else:
            b.add(FILLERS[name](rng))
        pos = m.end()
    b.add(template[pos:])


def separator(rng: random.Random) -> str:
    x = rng.random()
    return "\n\n" if x < 0.05 else "\n" if x < 0.2 else " "


def generate_text(rng: random.Random) -> TextBuilder:
    """One text of 1–4 KB with 1–3 PII values and 1–3 inserted look-alikes per KB."""
    target = rng.randint(1024, 4096)
    kb = target / 1024
    n_pii = max(1, round(kb * rng.uniform(1, 3)))
    n_decoy = max(1, round(kb * rng.uniform(1, 3)))  # more come with the filler sentences
    entities = list(ENTITY_WEIGHTS)
    weights = [ENTITY_WEIGHTS[e] for e in entities]
    slots = rng.choices(entities, weights, k=n_pii) + rng.choices(
        list(DECOY_GENERATORS), k=n_decoy
    )
    rng.shuffle(slots)

    def filler() -> None:
        if rng.random() < 0.15:
            render(b, rng, rng.choice(JSON_FILLERS), None)
        else:
            render(b, rng, rng.choice(FILLER_SENTENCES), None)
        b.add(separator(rng))

    b = TextBuilder()
    for i, slot in enumerate(slots):
        # Spread the slots evenly over the target length.
        while b.pos < target * (i + 1) / (len(slots) + 1):
            filler()
        if rng.random() < 0.35 and slot in KEYS:
            render(b, rng, rng.choice(JSON_TEMPLATES), slot)
        else:
            render(b, rng, rng.choice(PROSE[slot]), slot)
        b.add(separator(rng))
    while b.pos < target:
        filler()
    return b


def generate_corpus(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    corpus = []
    for i in range(n):
        b = generate_text(rng)
        text = b.text()
        assert len(text.encode("utf-8")) == b.pos
        corpus.append({"id": i, "text": text, "truth": b.truth, "decoys": b.decoys})
    return corpus


# ---------------------------------------------------------------------------------------------
# Running the two systems
# ---------------------------------------------------------------------------------------------


def run_atdp(binary: str, corpus: list[dict]) -> tuple[dict[int, list[dict]], float]:
    """Spans per text id, and the subprocess's wall time (start, JSON I/O and scan)."""
    payload = "".join(
        json.dumps({"id": t["id"], "text": t["text"]}, ensure_ascii=False) + "\n" for t in corpus
    ).encode("utf-8")
    started = time.perf_counter()
    proc = subprocess.run([binary, "scan"], input=payload, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"{binary} scan exited {proc.returncode}: {proc.stderr.decode(errors='replace')}")
    spans: dict[int, list[dict]] = {}
    for line in proc.stdout.decode("utf-8").splitlines():
        row = json.loads(line)
        spans[row["id"]] = [
            {"start": s["start"], "end": s["end"], "entity": s["entity"], "score": s["score"]}
            for s in row["spans"]
        ]
    missing = [t["id"] for t in corpus if t["id"] not in spans]
    if missing:
        sys.exit(f"{binary} scan returned no line for {len(missing)} texts (e.g. id {missing[0]})")
    return spans, elapsed


def load_presidio():
    """Presidio's predefined pattern recognizers (no NLP engine), and its version."""
    # EmailRecognizer validates with tldextract, whose default extractor would download the
    # public suffix list on first use; use the snapshot bundled with the package instead.
    import tldextract
    import tldextract.tldextract

    tldextract.tldextract.TLD_EXTRACTOR = tldextract.TLDExtract(
        suffix_list_urls=(), cache_dir=None
    )
    from importlib.metadata import version

    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        EmailRecognizer,
        IbanRecognizer,
        IpRecognizer,
        PhoneRecognizer,
        UrlRecognizer,
        UsSsnRecognizer,
    )

    recognizers = [
        EmailRecognizer(),
        PhoneRecognizer(),
        CreditCardRecognizer(),
        UsSsnRecognizer(),
        IbanRecognizer(),
        IpRecognizer(),
        UrlRecognizer(),
    ]
    return recognizers, version("presidio-analyzer")


def byte_offsets(text: str) -> list[int] | None:
    """Code point index -> UTF-8 byte offset table (None when the text is ASCII)."""
    if text.isascii():
        return None
    return list(itertools.accumulate((len(c.encode("utf-8")) for c in text), initial=0))


def run_presidio(
    recognizers, corpus: list[dict], threshold: float
) -> tuple[dict[int, list[dict]], dict[int, list[dict]], float, Counter]:
    """Presidio spans per text id at `threshold` and at 0 (byte offsets), analysis seconds,
    and seconds per recognizer."""
    from presidio_analyzer import EntityRecognizer

    raw: dict[int, list] = {}
    kept: dict[int, list] = {}
    per_recognizer: Counter = Counter()
    started = time.perf_counter()
    for t in corpus:
        text = t["text"]
        results = []
        for rec in recognizers:
            r0 = time.perf_counter()
            results.extend(rec.analyze(text, entities=rec.supported_entities, nlp_artifacts=None))
            per_recognizer[type(rec).__name__] += time.perf_counter() - r0
        # What AnalyzerEngine.analyze does after the recognizers: drop low scores, then
        # remove duplicates and contained results of the same entity.
        kept[t["id"]] = EntityRecognizer.remove_duplicates(
            [r for r in results if r.score >= threshold]
        )
        raw[t["id"]] = results
    elapsed = time.perf_counter() - started

    # Not timed: the same at threshold 0 (for the notes), and offsets to UTF-8 bytes.
    def to_spans(text: str, results) -> list[dict]:
        table = byte_offsets(text)
        conv = (lambda i: i) if table is None else table.__getitem__
        return [
            {"start": conv(r.start), "end": conv(r.end), "entity": r.entity_type,
             "score": r.score}
            for r in results
        ]

    at_threshold = {t["id"]: to_spans(t["text"], kept[t["id"]]) for t in corpus}
    at_zero = {
        t["id"]: to_spans(t["text"], EntityRecognizer.remove_duplicates(raw[t["id"]]))
        for t in corpus
    }
    return at_threshold, at_zero, elapsed, per_recognizer


# ---------------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------------


def overlaps(a: dict, b: dict) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


def exact(a: dict, b: dict) -> bool:
    return a["start"] == b["start"] and a["end"] == b["end"]


@dataclass
class Errors:
    """Samples of mistakes: (text id, span, note)."""

    fp: dict[str, list] = field(default_factory=lambda: defaultdict(list))
    fn: dict[str, list] = field(default_factory=lambda: defaultdict(list))
    boundary: dict[str, list] = field(default_factory=lambda: defaultdict(list))


def score(corpus: list[dict], predictions: dict[int, list[dict]]) -> tuple[dict, Errors]:
    """Counts per entity: truth, pred, and true positives by overlap and by exact boundary
    (pred-side for precision, truth-side for recall)."""
    counts = {e: Counter() for e in ENTITIES}
    errors = Errors()
    for t in corpus:
        preds = predictions.get(t["id"], [])
        for p in preds:
            counts.setdefault(p["entity"], Counter())
        for entity in counts:
            truth = [s for s in t["truth"] if s["entity"] == entity]
            pred = [s for s in preds if s["entity"] == entity]
            c = counts[entity]
            c["truth"] += len(truth)
            c["pred"] += len(pred)
            for p in pred:
                hits = [s for s in truth if overlaps(p, s)]
                if hits:
                    c["tp_pred"] += 1
                    if any(exact(p, s) for s in hits):
                        c["exact_pred"] += 1
                    else:
                        errors.boundary[entity].append((t["id"], p, hits[0]))
                else:
                    errors.fp[entity].append((t["id"], p, describe_fp(t, p)))
            for s in truth:
                hits = [p for p in pred if overlaps(p, s)]
                if hits:
                    c["tp_truth"] += 1
                    if any(exact(p, s) for p in hits):
                        c["exact_truth"] += 1
                else:
                    others = sorted({p["entity"] for p in preds if overlaps(p, s)})
                    note = f"reported as {', '.join(others)}" if others else ""
                    errors.fn[entity].append((t["id"], s, note))
    return counts, errors


def describe_fp(t: dict, p: dict) -> str:
    """What a false positive sits on: another entity's value or an inserted look-alike."""
    for s in t["truth"]:
        if overlaps(p, s):
            return f"on a {s['entity']}"
    for d in t["decoys"]:
        if overlaps(p, d):
            return f"on look-alike '{d['kind']}'"
    return ""


def prf(c: Counter, exact_match: bool) -> tuple[float | None, float | None, float | None]:
    """Precision, recall, F1 (None where undefined: no predictions or no truth)."""
    tp_p = c["exact_pred" if exact_match else "tp_pred"]
    tp_t = c["exact_truth" if exact_match else "tp_truth"]
    p = tp_p / c["pred"] if c["pred"] else None
    r = tp_t / c["truth"] if c["truth"] else None
    if p is None or r is None:
        return p, r, None
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def total(counts: dict, entities: list[str]) -> Counter:
    out: Counter = Counter()
    for e in entities:
        out.update(counts.get(e, Counter()))
    return out


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def triple(c: Counter | None, exact_match: bool) -> list[str]:
    if c is None:
        return ["—", "—", "—"]
    return [fmt(v) for v in prf(c, exact_match)]


def table(ours: dict, theirs: dict, exact_match: bool) -> list[str]:
    lines = [
        "| Entity | Truth | atdp P | atdp R | atdp F1 | Presidio P | Presidio R | Presidio F1 |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for e in ENTITIES:
        pres = None if e in PRESIDIO_UNSUPPORTED else theirs[e]
        label = "URL ¹" if e == "URL" else e
        lines.append(
            f"| {label} | {ours[e]['truth']:,} | "
            + " | ".join(triple(ours[e], exact_match) + triple(pres, exact_match))
            + " |"
        )
    shared = [e for e in ENTITIES if e not in PRESIDIO_UNSUPPORTED]
    no_url = [e for e in shared if e != "URL"]
    rows = [
        ("**All entities** (micro)", ENTITIES, False),
        ("**All but SECRET** (micro)", shared, True),
        ("**All but SECRET and URL** (micro)", no_url, True),
    ]
    for label, ents, with_presidio in rows:
        o = total(ours, ents)
        p = total(theirs, ents) if with_presidio else None
        lines.append(
            f"| {label} | {o['truth']:,} | "
            + " | ".join(triple(o, exact_match) + triple(p, exact_match))
            + " |"
        )
    return lines


def snippet(text: str, span: dict, width: int = 45) -> str:
    """Context around a byte span, the span in [[…]], on one line."""
    raw = text.encode("utf-8")
    s, e = span["start"], span["end"]
    lo, hi = max(0, s - width), min(len(raw), e + width)
    # Widen the context to character boundaries (UTF-8 continuation bytes are 0b10xxxxxx).
    while lo > 0 and raw[lo] & 0xC0 == 0x80:
        lo -= 1
    while hi < len(raw) and raw[hi] & 0xC0 == 0x80:
        hi += 1
    left, mid, right = (raw[a:b].decode("utf-8") for a, b in ((lo, s), (s, e), (e, hi)))
    return f"…{left}[[{mid}]]{right}…".replace("\n", "⏎")


def print_errors(name: str, errors: Errors, corpus: list[dict], n: int, seed: int) -> None:
    texts = {t["id"]: t["text"] for t in corpus}
    rng = random.Random(seed)
    print(f"\n### Errors: {name} (up to {n} per entity and kind, sampled)\n")
    for kind, groups in (("FP", errors.fp), ("FN", errors.fn), ("boundary", errors.boundary)):
        for entity in ENTITIES:
            items = groups.get(entity, [])
            if not items:
                continue
            sample = sorted(rng.sample(items, min(n, len(items))), key=lambda x: x[0])
            print(f"- **{kind} {entity}** ({len(items):,} in all)")
            for tid, span, extra in sample:
                if kind == "boundary":  # extra is the truth span it overlaps
                    extra = f"truth is {snippet(texts[tid], extra, 0).strip('…')}"
                note = f" — {extra}" if extra else ""
                where = f"id {tid} @{span['start']}..{span['end']}"
                print(f"  - {where}: `{snippet(texts[tid], span)}`{note}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--atdp-policy", required=True, help="path to the atdp-policy binary")
    ap.add_argument("--texts", type=int, default=2000, help="number of texts (1–4 KB each)")
    ap.add_argument("--seed", type=int, default=7, help="corpus seed (default 7)")
    ap.add_argument(
        "--out",
        default=os.path.join(tempfile.gettempdir(), "atdp-presidio-corpus.jsonl"),
        help="where to write the corpus as JSON Lines {id, text, truth, decoys}",
    )
    ap.add_argument(
        "--presidio-threshold",
        type=float,
        default=0.5,
        help="minimum Presidio score kept (AnalyzerEngine's default is 0; default here 0.5)",
    )
    ap.add_argument(
        "--show-errors",
        type=int,
        nargs="?",
        const=5,
        default=0,
        metavar="N",
        help="print N sampled false positives, false negatives and boundary mismatches per "
        "entity for both systems (default N: 5)",
    )
    args = ap.parse_args()

    # Corpus (not timed).
    corpus = generate_corpus(args.texts, args.seed)
    with open(args.out, "w", encoding="utf-8") as f:
        for t in corpus:
            f.write(json.dumps(t, ensure_ascii=False) + "\n")
    corpus_bytes = sum(len(t["text"].encode("utf-8")) for t in corpus)
    n_truth = sum(len(t["truth"]) for t in corpus)
    n_decoys = sum(len(t["decoys"]) for t in corpus)
    non_ascii = sum(not t["text"].isascii() for t in corpus)
    print(f"corpus: {args.texts} texts, {corpus_bytes:,} bytes -> {args.out}", file=sys.stderr)

    print("running atdp-policy scan …", file=sys.stderr)
    ours_spans, ours_secs = run_atdp(args.atdp_policy, corpus)

    print("loading Presidio recognizers …", file=sys.stderr)
    load_started = time.perf_counter()
    recognizers, presidio_version = load_presidio()
    load_secs = time.perf_counter() - load_started
    print("running Presidio …", file=sys.stderr)
    theirs_spans, theirs_zero, theirs_secs, per_rec = run_presidio(
        recognizers, corpus, args.presidio_threshold
    )

    ours, ours_err = score(corpus, ours_spans)
    theirs, theirs_err = score(corpus, theirs_spans)
    zero, _ = score(corpus, theirs_zero)

    mb = corpus_bytes / 1e6
    thr = args.presidio_threshold
    print(f"## atdp-policy vs Presidio {presidio_version} (pattern recognizers, no NLP engine)\n")
    print(
        f"Corpus: {args.texts:,} texts (seed {args.seed}), {mb:.2f} MB ({corpus_bytes:,} bytes, "
        f"{non_ascii:,} texts with non-ASCII characters); {n_truth:,} PII/secret values "
        f"({n_truth / (corpus_bytes / 1024):.2f} per KB) and {n_decoys:,} look-alikes "
        f"({n_decoys / (corpus_bytes / 1024):.2f} per KB). "
        f"Presidio score threshold: {thr:g} (AnalyzerEngine's default is 0).\n"
    )
    print("Overlap match (a prediction counts if it overlaps a truth span of the same entity):\n")
    print("\n".join(table(ours, theirs, exact_match=False)))
    print("\nExact boundaries (start and end both equal):\n")
    print("\n".join(table(ours, theirs, exact_match=True)))

    print("\nThroughput (1 MB = 10^6 bytes; corpus generation excluded):\n")
    print(
        f"- atdp-policy: **{mb / ours_secs:.2f} MB/s** — {ours_secs:.3f} s wall time of one "
        f"`{os.path.basename(args.atdp_policy)} scan` subprocess ({args.atdp_policy}), "
        "including process start and JSON Lines encoding/decoding."
    )
    print(
        f"- Presidio: **{mb / theirs_secs:.2f} MB/s** — {theirs_secs:.3f} s in-process, one "
        f"thread, the 7 recognizers' `analyze` plus threshold and de-duplication "
        f"(loading them: {load_secs:.2f} s, not counted). By recognizer: "
        + ", ".join(
            f"{k} {v / theirs_secs:.0%}" for k, v in sorted(per_rec.items(), key=lambda kv: -kv[1])
        )
        + "."
    )

    print("\nNotes:\n")
    url_pred, url_tp = theirs["URL"]["pred"], theirs["URL"]["tp_pred"]
    print(
        f"- ¹ URL truth is only URLs with embedded credentials (`scheme://user:pass@host…`). "
        f"Presidio's UrlRecognizer reports every URL and bare domain (e.g. the domain of an "
        f"email address): {url_pred:,} URL predictions, {url_tp:,} of them on a credential URL; "
        "its URL precision is therefore not comparable."
    )
    print("- Presidio has no recognizer for SECRET (API keys, tokens): shown as —.")
    print(
        "- Without an NLP engine Presidio applies no context words (its LemmaContextAwareEnhancer "
        "needs tokens), so each recognizer's base score stands: PhoneRecognizer 0.4, US_SSN "
        "0.5 (medium pattern), validated email, card and IBAN matches 1.0."
    )
    dropped = {
        e: zero[e]["pred"] - theirs[e]["pred"]
        for e in ENTITIES
        if e not in PRESIDIO_UNSUPPORTED and zero[e]["pred"] != theirs[e]["pred"]
    }
    if dropped:
        parts = []
        for e, d in dropped.items():
            p, r, _ = prf(zero[e], exact_match=False)
            parts.append(f"{e} +{d:,} spans (P {fmt(p)}, R {fmt(r)})")
        print(f"- At threshold 0 instead of {thr:g}, Presidio would add: " + "; ".join(parts) + ".")
    print(
        "- Scoring: precision = predictions overlapping a same-entity truth span / predictions; "
        "recall = truth spans overlapped by a same-entity prediction / truth spans. Offsets are "
        "UTF-8 bytes; Presidio's code-point offsets are converted."
    )
    print(
        "- Email validation uses tldextract's bundled public-suffix snapshot (no network)."
    )

    if args.show_errors:
        print_errors("atdp-policy", ours_err, corpus, args.show_errors, args.seed)
        print_errors(f"Presidio (threshold {thr:g})", theirs_err, corpus, args.show_errors,
                     args.seed)


if __name__ == "__main__":
    main()
