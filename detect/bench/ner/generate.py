#!/usr/bin/env python3
"""Write a labelled corpus of agent traffic with names, places and organisations.

Each line of the output is one text with the truth of every inserted entity, as character
offsets (Python string indices, end exclusive):

    {"text": "...", "spans": [{"start": 10, "end": 18, "entity": "PERSON"}, ...],
     "meta": {"template": "chat.refund", "category": "chat", "locale": "de_DE"}}

Entities: PERSON (a full, first or last name, without titles), LOCATION (a whole street
address as one span: number, street, postcode and city; or a city, region or country) and
ORGANIZATION. Values come from Faker in ten Latin-script European locales; the texts are chat
turns (some lower-case), CRM notes, e-mails, JSON tool results (names inside JSON strings),
log lines, and hard negatives: words that are also names used as ordinary words ("will",
"may", "grant", "rose"), product names, weekdays, months and other look-alikes, which must not
be reported.

Templates are split into two disjoint sets: `--split tune` (every other template of each
category) for tuning thresholds and rules, `--split heldout` (the rest) for the number that is
reported, and `--split all`. The same `--seed`, `--texts` and `--split` give the same corpus (Faker is
pinned in requirements.txt).

    python generate.py --texts 2000 --seed 7 --split heldout --out corpus.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta

from faker import Faker

LOCALES = [
    "en_GB",
    "en_US",
    "de_DE",
    "fr_FR",
    "es_ES",
    "it_IT",
    "nl_NL",
    "pl_PL",
    "pt_PT",
    "sv_SE",
]

PERSON, LOCATION, ORGANIZATION = "PERSON", "LOCATION", "ORGANIZATION"

# Look-alikes that are not entities here: products, tools, plans and ordinary capitalised words.
PRODUCTS = [
    "Kindle Paperwhite", "PlayStation 5", "Galaxy S24", "ThinkPad X1 Carbon", "AirPods Pro",
    "Excel", "PowerPoint", "Postgres 16", "Kubernetes", "Terraform", "Nginx", "Redis",
    "Pro plan", "Enterprise tier", "Starter Kit", "Model Y", "Surface Laptop", "Echo Dot",
    "Photoshop", "Kafka", "Jupyter", "Premium Plus", "Gold membership", "Turbo Boost",
]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
]
# Dates and timestamps are drawn around a fixed day, not today, so that a corpus can be rebuilt.
EPOCH = datetime(2026, 11, 1, 12, 0, 0)
STATUSES = ["Open", "Pending", "Resolved", "Escalated", "Closed", "On Hold", "Waiting"]

# A slot: {P1} (person 1's full name), {P1.first}, {P1.last}, {P1:Will} (first name Will), {ADDR},
# {CITY}, {REGION}, {COUNTRY}, {ORG} (entities), or a look-alike or filler ({PRODUCT}, {MONTH}...).
SLOT = re.compile(r"\{([A-Za-z0-9_.:]+)\}")


@dataclass(frozen=True)
class Template:
    id: str
    category: str
    text: str
    lower: bool = False
    locales: tuple[str, ...] = ()


def T(id: str, category: str, text: str, lower: bool = False, locales: str = "") -> Template:
    return Template(id, category, text, lower, tuple(locales.split()))


TEMPLATES = [
    # Chat turns, as a user or an assistant would write them.
    T("chat.refund", "chat",
      "Hi, I'm {P1} and I ordered a {PRODUCT} on {DATE}. It never arrived at {ADDR}. Can you refund order {ORDER}?"),
    T("chat.move", "chat",
      "I moved from {CITY} to {CITY2} last {MONTH}, please update my address to {ADDR}."),
    T("chat.colleague", "chat",
      "Can you draft a reply to {P1.first}? She asked whether {ORG} can ship to {COUNTRY} before {WEEKDAY}."),
    T("chat.assistant", "chat",
      "Sure {P1.first}! I found 3 branches of {ORG} near {CITY}. The closest is at {ADDR}."),
    T("chat.meeting", "chat",
      "Set up a call with {P1} and {P2} from {ORG} next {WEEKDAY} at {TIME}."),
    T("chat.travel", "chat",
      "Book me a hotel in {CITY}, {REGION} for {NUM} nights; my colleague {P1} joins on the {NTH}."),
    T("chat.summary", "chat",
      "Summarise this thread: {P1} (at {ORG}) disagrees with {P2.last} about the {PRODUCT} rollout in {COUNTRY}."),
    T("chat.lower.name", "chat",
      "hey its {P1} again, my package still hasnt shown up at {ADDR}", lower=True),
    T("chat.lower.city", "chat",
      "can u check if {ORG} has an office in {CITY}? i need to visit {P1.first} there", lower=True),
    T("chat.lower.country", "chat",
      "ok so {P1.first} said the invoice goes to {ORG} in {COUNTRY}, not to {P2}", lower=True),
    T("chat.lower.address", "chat",
      "pls send the contract to {P1}, {ADDR} thx", lower=True),
    T("chat.de", "chat",
      "Hallo, hier ist {P1}. Meine neue Adresse lautet {ADDR}. Bitte an {ORG} weiterleiten.",
      locales="de_DE"),
    T("chat.fr", "chat",
      "Bonjour, je m'appelle {P1} et j'habite {ADDR}. Je travaille chez {ORG} à {CITY2}.",
      locales="fr_FR"),
    T("chat.es", "chat",
      "Hola, soy {P1}. ¿Podéis enviar el pedido {ORDER} a {ADDR}? Gracias.", locales="es_ES"),
    T("chat.it", "chat",
      "Buongiorno, sono {P1} di {ORG}. Il nostro ufficio è in {ADDR}.", locales="it_IT"),
    T("chat.nl", "chat",
      "Hoi, met {P1}. Kunnen jullie het pakket naar {ADDR} sturen? Groet uit {CITY2}.",
      locales="nl_NL"),
    # CRM notes.
    T("crm.call", "crm",
      "Call note {DATE}: spoke with {P1} ({ORG}). Wants a quote for {NUM} seats of {PRODUCT}. Follow up {WEEKDAY}."),
    T("crm.account", "crm",
      "Account: {ORG}\nContact: {P1}\nBilling address: {ADDR}\nRegion: {REGION}\nStatus: {STATUS}"),
    T("crm.handover", "crm",
      "Handover from {P1.first} to {P2}: {ORG} renews in {MONTH}; decision maker is {P3}, based in {CITY}."),
    T("crm.visit", "crm",
      "Visited {ORG} at {ADDR}. Met {P1} and {P2.first}; they expand to {COUNTRY} next year."),
    T("crm.churn", "crm",
      "Churn risk: {ORG} ({CITY}, {COUNTRY}). {P1.last} complained about {PRODUCT} downtime on {DATE}."),
    T("crm.lead", "crm",
      "Lead {TICKET} | {P1} | {ORG} | {CITY} | source: webinar | score {NUM}"),
    T("crm.lower", "crm",
      "note: {P1} from {ORG} called re invoice {ORDER}, lives in {CITY} now", lower=True),
    T("crm.dupe", "crm",
      "Possible duplicate: {P1} / {P1.last}, {P1.first} at {ADDR}. Merge with record {TICKET}?"),
    # E-mails.
    T("mail.support", "email",
      "Subject: Your order {ORDER}\n\nDear {P1},\n\nthank you for contacting {ORG}. Your parcel will be delivered to {ADDR} on {WEEKDAY}.\n\nKind regards,\n{P2}\nCustomer Care"),
    T("mail.intro", "email",
      "Hi {P1.first},\n\nlet me introduce {P2}, who leads procurement at {ORG} in {CITY}. I think you two should talk.\n\nBest,\n{P3.first}"),
    T("mail.invoice", "email",
      "From: billing\nTo: {P1}\n\nInvoice {ORDER} for {AMOUNT} is due on {DATE}. Please pay to {ORG}, {ADDR}."),
    T("mail.forward", "email",
      "---------- Forwarded message ---------\nFrom: {P1}\nDate: {WEEKDAY}, {DATE}\nSubject: Office move\n\nWe are moving to {ADDR} in {MONTH}. {ORG} keeps the old office in {CITY2}."),
    T("mail.signature", "email",
      "Thanks, talk soon.\n\n--\n{P1}\nHead of Operations, {ORG}\n{ADDR}\n{COUNTRY}"),
    T("mail.de", "email",
      "Sehr geehrte Frau {P1.last},\n\nvielen Dank für Ihre Anfrage. {ORG} liefert nach {ADDR}.\n\nMit freundlichen Grüßen\n{P2}",
      locales="de_DE"),
    T("mail.fr", "email",
      "Madame {P1.last},\n\nvotre colis sera livré au {ADDR} le {DATE}.\n\nCordialement,\n{P2}, {ORG}",
      locales="fr_FR"),
    T("mail.pl", "email",
      "Szanowny Panie {P1.last},\n\nprzesyłka zostanie dostarczona na adres {ADDR}.\n\nPozdrawiam,\n{P2}",
      locales="pl_PL"),
    T("mail.sv", "email",
      "Hej {P1.first}!\n\nVi har skickat din beställning {ORDER} till {ADDR}.\n\nMvh {P2}, {ORG}",
      locales="sv_SE"),
    # JSON tool results and calls: names inside JSON strings.
    T("json.customer", "json",
      '{"customer":"{P1}","email_verified":true,"address":"{ADDR}","orders":{NUM}}'),
    T("json.crm_lookup", "json",
      '{"result":{"company":"{ORG}","hq_city":"{CITY}","country":"{COUNTRY}","owner":"{P1}","tier":"{PRODUCT}"}}'),
    T("json.contacts", "json",
      '{"contacts":[{"name":"{P1}","role":"CTO"},{"name":"{P2}","role":"CFO"}],"org":"{ORG}"}'),
    T("json.shipment", "json",
      '{"shipment_id":"{TICKET}","recipient":{"first_name":"{P1.first}","last_name":"{P1.last}"},"ship_to":"{ADDR}","eta":"{DATE}"}'),
    T("json.tool_call", "json",
      '{"name":"send_email","arguments":"{\\"to_name\\":\\"{P1}\\",\\"subject\\":\\"Meeting in {CITY}\\"}"}'),
    T("json.search", "json",
      '{"query":"{ORG} {CITY}","hits":[{"title":"{ORG} – contact","snippet":"Visit us at {ADDR}."}]}'),
    T("json.user_profile", "json",
      '{"id":{NUM},"display_name":"{P1}","location":"{CITY}, {REGION}","employer":"{ORG}","plan":"{PRODUCT}"}'),
    T("json.lower", "json",
      '{"msg":"{P1} asked for a callback","city":"{CITY}"}', lower=True),
    T("json.calendar", "json",
      '{"event":"Quarterly review","day":"{WEEKDAY}","attendees":["{P1}","{P2}"],"where":"{ORG}, {ADDR}"}'),
    # Log lines.
    T("log.kv", "log",
      "{TS} INFO crm.sync updated contact name=\"{P1}\" org=\"{ORG}\" city=\"{CITY}\" id={NUM}"),
    T("log.error", "log",
      "{TS} ERROR geocode failed for address '{ADDR}' (customer {P1.last}): timeout after 3000ms"),
    T("log.audit", "log",
      "{TS} audit user={NUM} action=export target=\"{ORG}\" country={COUNTRY} status={STATUS}"),
    T("log.delivery", "log",
      "[{TS}] courier: delivered to {P1} at {ADDR}, signed by {P2.first}"),
    T("log.json", "log",
      '{"ts":"{TS}","level":"warn","msg":"duplicate account","name":"{P1}","region":"{REGION}"}'),
    T("log.lower", "log",
      "{TS} debug lookup person={P1} employer={ORG}", lower=True),
    # Hard negatives: common words that are also names, products, dates; entities may be present.
    T("neg.will", "negative",
      "I will grant you access to the {PRODUCT} workspace by {WEEKDAY}; prices rose by {NUM}% in {MONTH}."),
    T("neg.may", "negative",
      "May I ask whether the {PRODUCT} upgrade may be rolled back? We may need it before {MONTH} {NTH}."),
    T("neg.grant", "negative",
      "Please grant {P1:Will} read access. The grant expires in {MONTH}; the rose garden booking is unrelated."),
    T("neg.names", "negative",
      "{P1:Rose} said sales rose in {MONTH}; {P2:April} joins in April and {P3:Mark} will mark the invoices."),
    T("neg.products", "negative",
      "Compare {PRODUCT} with {PRODUCT2}: both ship in {MONTH}, the second is cheaper on {WEEKDAY}s."),
    T("neg.status", "negative",
      "Ticket {TICKET} status changed from {STATUS} to {STATUS2} on {WEEKDAY} at {TIME}."),
    T("neg.words", "negative",
      "Mark the task as done, bill the client for {NUM} hours and be frank about the delay; hope is not a plan."),
    T("neg.lower", "negative",
      "ok will do. may need to grant more time, sales rose in june and april was slow", lower=True),
    T("neg.release", "negative",
      "Release notes {MONTH}: {PRODUCT} now supports dark mode; Excel export fixed; Sunday maintenance window moved."),
    T("neg.mixed", "negative",
      "{P1.first} will review it on {WEEKDAY}; May and June numbers for {ORG} rose sharply in {COUNTRY}."),
    T("neg.tech", "negative",
      "Deploy {PRODUCT} to the blue-green cluster? No: use region eu-west-1, Helm chart v{NUM}.2 and Redis {NUM}."),
    T("neg.json", "negative",
      '{"plan":"{PRODUCT}","renewal_month":"{MONTH}","status":"{STATUS}","will_renew":true,"note":"grant pending"}'),
    T("neg.log", "negative",
      "{TS} INFO scheduler run=weekly day={WEEKDAY} month={MONTH} job=\"{PRODUCT} backup\" status={STATUS}"),
]


def split_of(index_in_category: int) -> str:
    return "heldout" if index_in_category % 2 == 1 else "tune"


def templates_for(split: str) -> list[Template]:
    seen: dict[str, int] = {}
    chosen = []
    for t in TEMPLATES:
        i = seen.get(t.category, 0)
        seen[t.category] = i + 1
        if split == "all" or split_of(i) == split:
            chosen.append(t)
    return chosen


class Values:
    """Values for one text, drawn from one locale's Faker and the text's random generator."""

    def __init__(self, fake: Faker, locale: str, rng: random.Random):
        self.fake = fake
        self.locale = locale
        self.rng = rng
        self.cache: dict[str, str] = {}

    def person(self, key: str, part: str) -> str:
        # `P1:Will` is person 1 with the first name Will (a name that is also an ordinary word).
        key, _, forced = key.partition(":")
        if forced:
            self.cache[key + ".first"] = forced
        first = self.cache.setdefault(key + ".first", self.fake.first_name())
        last = self.cache.setdefault(key + ".last", self.fake.last_name())
        return {"first": first, "last": last, "full": f"{first} {last}"}[part]

    def address(self) -> str:
        f = self.fake
        street = " ".join(f.street_address().replace("\n", ", ").split())
        if self.locale == "en_US":
            return f"{street}, {f.city()}, {f.state_abbr()} {f.postcode()}"
        if self.locale == "en_GB":
            return f"{street}, {f.city()} {f.postcode()}"
        return f"{street}, {f.postcode()} {f.city()}"

    def company(self) -> str:
        # Some locales' providers return a bare surname ("Borges"), which is a person's name as
        # much as a company's: keep names of two words or more.
        for _ in range(10):
            name = self.fake.company()
            if " " in name.strip():
                return name
        return name + " Group"

    def region(self) -> str:
        return self.fake.administrative_unit()

    def slot(self, name: str) -> tuple[str, str | None]:
        """The text of a slot and its entity (None for a look-alike or filler)."""
        f, rng = self.fake, self.rng
        if name[0] == "P" and name[1:2].isdigit():
            key, _, part = name.partition(".")
            if ":" in part:
                part, _, forced = part.partition(":")
                key = f"{key}:{forced}"
            return self.person(key, part or "full"), PERSON
        # A numbered slot (CITY2, PRODUCT2) is a second value of the same kind; a repeated slot
        # repeats its value.
        base = name.rstrip("0123456789")
        if name not in self.cache:
            value = {
                "ADDR": self.address,
                "CITY": f.city,
                "REGION": self.region,
                "COUNTRY": f.country,
                "ORG": self.company,
                "PRODUCT": lambda: rng.choice(PRODUCTS),
                "WEEKDAY": lambda: rng.choice(WEEKDAYS),
                "MONTH": lambda: rng.choice(MONTHS),
                "STATUS": lambda: rng.choice(STATUSES),
                "DATE": lambda: (EPOCH + timedelta(days=rng.randint(-700, 365))).date().isoformat(),
                "TIME": lambda: f"{rng.randint(7, 19)}:{rng.choice(['00', '15', '30', '45'])}",
                "TS": lambda: (EPOCH - timedelta(seconds=rng.randint(0, 365 * 86400), milliseconds=rng.randint(0, 999))).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
                "NUM": lambda: str(rng.randint(2, 480)),
                "NTH": lambda: rng.choice(["1st", "2nd", "3rd", "14th", "21st", "30th"]),
                "AMOUNT": lambda: f"EUR {rng.randint(20, 9000)}.{rng.randint(0, 99):02d}",
                "ORDER": lambda: f"#{rng.randint(100000, 999999)}",
                "TICKET": lambda: f"{rng.choice(['SUP', 'OPS', 'CRM'])}-{rng.randint(1000, 99999)}",
            }[base]()
            self.cache[name] = value.strip()
        entity = {
            "ADDR": LOCATION, "CITY": LOCATION, "REGION": LOCATION, "COUNTRY": LOCATION,
            "ORG": ORGANIZATION,
        }.get(base)
        return self.cache[name], entity


def render(template: Template, values: Values) -> tuple[str, list[dict]]:
    json_template = template.category in ("json",) or template.text.startswith("{\"")
    out: list[str] = []
    spans: list[dict] = []
    pos = 0
    cursor = 0

    def emit(piece: str, entity: str | None) -> None:
        nonlocal cursor
        if template.lower:
            piece = "".join(c.lower() if len(c.lower()) == 1 else c for c in piece)
        if entity is not None:
            spans.append({"start": cursor, "end": cursor + len(piece), "entity": entity})
        out.append(piece)
        cursor += len(piece)

    for m in SLOT.finditer(template.text):
        emit(template.text[pos:m.start()], None)
        value, entity = values.slot(m.group(1))
        if json_template:
            # Inside a JSON string: escape as JSON would (quotes, backslashes, newlines).
            value = json.dumps(value, ensure_ascii=False)[1:-1]
            if '\\"' in template.text[max(0, m.start() - 3):m.start()]:
                # A JSON string nested in a JSON string (a tool call's arguments): escape twice.
                value = json.dumps(value, ensure_ascii=False)[1:-1]
        emit(value, entity)
        pos = m.end()
    emit(template.text[pos:], None)
    return "".join(out), spans


def generate(texts: int, seed: int, split: str) -> list[dict]:
    rng = random.Random(seed)
    fakers = {}
    for i, locale in enumerate(LOCALES):
        fake = Faker(locale)
        fake.seed_instance(seed * 1000 + i)
        fakers[locale] = fake
    chosen = templates_for(split)
    records = []
    for n in range(texts):
        template = chosen[n % len(chosen)] if n < len(chosen) else rng.choice(chosen)
        locale = rng.choice(template.locales or LOCALES)
        values = Values(fakers[locale], locale, random.Random(rng.getrandbits(64)))
        text, spans = render(template, values)
        for s in spans:
            assert text[s["start"]:s["end"]].strip() == text[s["start"]:s["end"]], (template.id, s)
        records.append({
            "text": text,
            "spans": spans,
            "meta": {"template": template.id, "category": template.category, "locale": locale},
        })
    return records


def main() -> int:
    # Some Faker providers build their lists from sets (it_IT's cities), whose order follows the
    # string hash seed: fix it, or the same --seed gives another corpus.
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--texts", type=int, default=2000, help="texts to write (default 2000)")
    ap.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    ap.add_argument("--split", choices=["tune", "heldout", "all"], default="all",
                    help="template set: tune (every other template of each category), heldout (the rest), all")
    ap.add_argument("--out", default="-", help="output JSON Lines file (default stdout)")
    ap.add_argument("--list-templates", action="store_true", help="print template ids by split")
    args = ap.parse_args()
    if args.list_templates:
        for split in ("tune", "heldout"):
            ids = [t.id for t in templates_for(split)]
            print(f"{split} ({len(ids)}): {' '.join(ids)}")
        return 0
    records = generate(args.texts, args.seed, args.split)
    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
    with out:
        for r in records:
            out.write(json.dumps(r, ensure_ascii=False) + "\n")
    spans = sum(len(r["spans"]) for r in records)
    chars = sum(len(r["text"].encode("utf-8")) for r in records)
    print(f"generate: {len(records)} texts, {chars / 1e6:.2f} MB, {spans} spans, "
          f"{len(templates_for(args.split))} templates ({args.split})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
