#!/usr/bin/env python3
"""Write the training corpus of the names tagger: agent traffic with labelled names, places
and organisations, built by composition rather than from a fixed list of texts.

The corpus has the shape of detect/bench/ner's (one JSON object a line: the text and its
spans as character offsets), so that the same tools read both, but none of its texts: a text
here is a random frame (chat, ticket, transcript, e-mail, CRM note, JSON, YAML, CSV, XML, log
line, address label...) filled with random sentences from a bank of clauses, each with zero or
more entity slots, in one of 30 Latin-script locales of Faker (the benchmark uses 10), in its
own case or lower-cased. Entities are drawn with their variants (with or without title,
family name first, initials, address on one line or on several, with or without postcode,
companies by Faker or by pattern). Look-alikes that must stay unlabelled are drawn as often as
entities: weekdays, months, products, statuses, capitalised headings, names used as words.

    python corpus.py --texts 40000 --seed 1 --out train.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys

from faker import Faker

LOCALES = [
    "en_GB", "en_US", "en_IE", "en_AU", "en_CA", "en_NZ", "de_DE", "de_AT", "de_CH", "fr_FR",
    "fr_BE", "fr_CH", "es_ES", "es_MX", "it_IT", "nl_NL", "nl_BE", "pl_PL", "pt_PT", "pt_BR",
    "sv_SE", "da_DK", "no_NO", "fi_FI", "cs_CZ", "sk_SK", "hu_HU", "ro_RO", "hr_HR", "sl_SI",
    "en_IN", "tr_TR", "et_EE", "lt_LT", "id_ID", "en_TH", "es_CO", "es_AR", "fr_CA", "de_LI",
]
PERSON, LOCATION, ORGANIZATION = "PERSON", "LOCATION", "ORGANIZATION"

TITLES = ["Mr", "Mr.", "Mrs", "Mrs.", "Ms", "Ms.", "Miss", "Dr", "Dr.", "Prof.", "Herr", "Frau",
          "M.", "Mme", "Madame", "Monsieur", "Sr.", "Sra.", "Don", "Doña", "Sig.", "Sig.ra",
          "Dott.", "Dott.ssa", "Signora", "Pan", "Pani", "pan", "pani", "dhr.", "mevr.", "herr",
          "fru", "Sayın", "Bay", "Bayan", "Shri", "Smt.", "Herrn", "Senhor", "Senhora"]
# Product and interface text: names of sales, features, labels, card brands, browsers and
# platforms, which are no entity.
INTERFACE = ["Spring Sale", "Holiday Sale", "Flash Deal", "New Arrivals", "New Feature",
             "Beta Feature", "Success", "Saved", "Terms and Conditions", "Terms of Use",
             "Cookie Policy", "Visa", "Visa Debit", "Mastercard", "American Express", "Amex",
             "Maestro", "Google Chrome", "Chrome", "Firefox", "Safari", "Microsoft Edge", "Edge",
             "Opera", "Brave", "Android", "Windows 11", "Apple Pay", "PayPal", "Klarna",
             "Dark Mode", "Light Mode", "Focus Mode", "Smart Reply", "Quick Settings",
             "Account Settings", "Order History", "Help Center", "Gift Cards", "Rewards",
             "Loyalty Program", "Member Pricing", "Free Shipping", "Express Checkout",
             "Notifications", "Dashboard", "Analytics", "Insights", "Overview", "Inbox",
             "Alert", "Warning", "Error", "Critical", "Notice", "Info", "Debug"]
MONTH_ABBREVIATIONS = ["Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug", "Sep", "Sept", "Oct",
                       "Nov", "Dec"]
# Syllables of invented names, so that the network learns names by their place and shape as
# well as by the lists: names of locales no generator has.
SYLLABLES = ["ka", "ra", "mi", "to", "na", "le", "vi", "sha", "an", "dre", "lo", "ke", "ma",
             "ri", "ya", "su", "ol", "em", "bu", "chi", "de", "go", "ha", "ju", "ni", "pa",
             "ta", "vo", "we", "zo", "ay", "ur", "is", "ek", "ba", "dra", "mo", "sa", "ti"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday",
            "Montag", "Dienstag", "Freitag", "lundi", "mardi", "vendredi", "lunes", "martes"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December", "Januar", "Juni", "juillet", "mayo"]
PRODUCTS = ["iPhone 15", "MacBook Air", "Pixel 8", "Fire TV Stick", "Xbox Series X",
            "Dynamics 365", "Salesforce", "Slack", "Zoom", "Notion", "Jira", "Confluence",
            "Outlook", "Teams", "GitHub Actions", "Docker", "Ansible", "Grafana", "Snowflake",
            "Basic plan", "Business tier", "Family bundle", "Ultra HD", "Smart Hub 2",
            "Router X200", "Aurora", "Phoenix", "Atlas", "Orion", "Mercury", "Falcon 9",
            "Nova Lite", "Sierra", "Summit Pro", "Harmony Remote", "Liberty Plan"]
STATUSES = ["open", "pending", "resolved", "escalated", "closed", "on hold", "new", "active",
            "cancelled", "shipped", "delivered", "refunded", "Open", "Closed", "Shipped"]
HEADINGS = ["Order Summary", "Next Steps", "Action Items", "Billing Details", "Customer Info",
            "Shipping Address", "Account Overview", "Case Notes", "Internal Only", "Root Cause",
            "Quick Start", "Release Notes", "Known Issues", "Support Team", "Sales Pipeline"]
WORD_NAMES = ["will", "may", "mark", "rose", "grant", "bill", "frank", "hope", "joy", "faith",
              "june", "april", "august", "dawn", "summer", "amber", "hunter", "chase", "art",
              "sue", "pat", "jack", "lane", "ray", "gene", "penny", "ruby", "crystal", "sky"]
ORG_WORDS = ["Solutions", "Systems", "Logistics", "Consulting", "Partners", "Holdings",
             "Group", "Labs", "Analytics", "Software", "Foods", "Energy", "Capital", "Health",
             "Media", "Motors", "Bank", "Insurance", "Pharma", "Robotics", "Studio", "Works"]
LEGAL = ["Ltd", "Ltd.", "LLC", "Inc.", "GmbH", "AG", "SA", "S.A.", "SARL", "SAS", "S.p.A.",
         "S.r.l.", "B.V.", "N.V.", "AB", "A/S", "Oy", "Sp. z o.o.", "s.r.o.", "Kft.", "plc",
         "Lda.", "S.L.", "& Co.", "KG", "ApS", "AS"]
INSTITUTIONS = ["University of {city}", "{city} City Council", "{city} General Hospital",
                "Bank of {city}", "{last} Foundation", "St. {first}'s Hospital",
                "{city} Chamber of Commerce", "Museum of {city}", "{region} Police"]


LOREM_FAKERS: dict[str, Faker] = {}


class Draw:
    """Entity values of one text, from one locale's Faker and the text's random generator."""

    def __init__(self, fake: Faker, locale: str, rng: random.Random):
        self.fake, self.locale, self.rng = fake, locale, rng
        self.people: list[tuple[str, str]] = []

    def lorem(self, locale: str, n: int) -> list[str]:
        fake = LOREM_FAKERS.setdefault(locale, Faker(locale))
        return [w.strip(".") for w in fake.words(nb=n)]

    def invented(self) -> str:
        rng = self.rng
        name = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3)))
        return name.capitalize()

    def first(self) -> str:
        r = self.rng.random()
        if r < 0.05:
            return self.invented()
        if r < 0.08:
            return self.rng.choice(WORD_NAMES).capitalize()
        if r < 0.5:
            return self.fake.first_name_female() if hasattr(self.fake, "first_name_female") else self.fake.first_name()
        return self.fake.first_name()

    def last(self) -> str:
        if self.rng.random() < 0.05:
            return self.invented() + self.rng.choice(["", "", "er", "ov", "oğlu", "son", "an"])
        return self.fake.last_name()

    def new_person(self) -> tuple[str, str]:
        p = (self.first(), self.last())
        if self.rng.random() < 0.08:
            p = (p[0], f"{p[1]}-{self.last()}")
        self.people.append(p)
        return p

    def person(self) -> list[tuple[str, str | None]]:
        """A person's name as pieces: (text, entity) with titles unlabelled."""
        rng = self.rng
        if self.people and rng.random() < 0.25:
            first, last = rng.choice(self.people)
        else:
            first, last = self.new_person()
        r = rng.random()
        pieces: list[tuple[str, str | None]] = []
        if r < 0.12:
            pieces.append((rng.choice(TITLES) + " ", None))
            pieces.append((last if rng.random() < 0.6 else f"{first} {last}", PERSON))
        elif r < 0.45:
            pieces.append((f"{first} {last}", PERSON))
        elif r < 0.72:
            pieces.append((first, PERSON))
        elif r < 0.82:
            pieces.append((last, PERSON))
        elif r < 0.9:
            pieces.append((f"{last}, {first}", PERSON))
        elif r < 0.95:
            pieces.append((f"{first[0]}. {last}", PERSON))
        else:
            pieces.append((f"{first} {self.first()} {last}", PERSON))
        return pieces

    def address(self) -> str:
        f, rng = self.fake, self.rng
        try:
            street = " ".join(f.street_address().replace("\n", ", ").split())
        except AttributeError:
            street = f"{f.building_number()} {f.street_name()}"
        city = self.city()
        try:
            post = f.postcode()
        except AttributeError:
            post = str(rng.randint(10000, 99999))
        r = rng.random()
        if r < 0.15:
            return street
        if r < 0.3:
            return f"{street}, {city}"
        if self.locale.startswith("en_"):
            if self.locale == "en_US":
                return f"{street}, {city}, {f.state_abbr()} {post}"
            return f"{street}, {city} {post}"
        return f"{street}, {post} {city}"

    def city(self) -> str:
        return self.fake.city()

    def region(self) -> str:
        for method in ("administrative_unit", "state", "region", "province", "county"):
            if hasattr(self.fake, method):
                try:
                    return getattr(self.fake, method)()
                except (AttributeError, TypeError):
                    continue
        return self.fake.city()

    def country(self) -> str:
        return self.fake.country()

    def place(self) -> str:
        r = self.rng.random()
        return self.city() if r < 0.6 else self.country() if r < 0.8 else self.region()

    def org(self) -> str:
        rng, f = self.rng, self.fake
        r = rng.random()
        if r < 0.45:
            for _ in range(10):
                name = f.company().strip()
                if " " in name:
                    return name
            return f"{name} {rng.choice(LEGAL)}"
        if r < 0.65:
            return f"{self.last()} {rng.choice(ORG_WORDS)} {rng.choice(LEGAL)}"
        if r < 0.78:
            return f"{self.last()} & {self.last()}"
        if r < 0.88:
            return f"{self.last()} {rng.choice(LEGAL)}"
        if r < 0.94:
            return f"{rng.choice(ORG_WORDS)[:-1] if rng.random() < 0.3 else self.last()} {rng.choice(ORG_WORDS)}"
        return rng.choice(INSTITUTIONS).format(city=self.city(), last=self.last(),
                                               first=self.first(), region=self.region())


# Clauses: {P} a person, {A} an address, {C} a city, {L} any place, {O} an organisation;
# {W} weekday, {M} month, {X} product, {S} status, {N} number, {D} date, {H} heading (fillers).
CLAUSES = [
    "my name is {P}", "this is {P} from {O}", "{P} here", "I spoke to {P} yesterday",
    "{P} will call you back", "please ask {P} to confirm", "thanks {P}", "cc {P}",
    "{P} and {P} are on the thread", "ask {P} about the {X}", "assign it to {P}",
    "{P} reported that the {X} keeps crashing", "{P} is our account manager",
    "{P} left {O} in {M}", "{P} joined {O} as head of sales", "the customer, {P}, wants a refund",
    "escalated by {P} on {W}", "approved by {P}", "reviewed with {P} and {P}",
    "the parcel goes to {A}", "ship it to {A}", "deliver to {A} before {W}",
    "new address: {A}", "we moved to {A}", "our office is at {A}", "billing address {A}",
    "she lives in {C}", "he is based in {L}", "the warehouse near {C} is closed",
    "flights from {C} to {C} are delayed", "we expand to {L} in {M}", "the {C} branch",
    "a store in {C}, {L}", "customers in {L} pay VAT", "relocating from {L}",
    "{O} placed an order for {N} units", "we signed with {O}", "{O} wants a discount",
    "a quote for {O}", "{O} is a reseller in {L}", "contract with {O} renews in {M}",
    "the invoice from {O} is overdue", "{O} ({C}) opened a ticket", "{P} works at {O}",
    "{P} from {O} in {C}", "meet {P} at {O}, {A}", "call {P} at {O} on {W}",
    "the {X} order for {P} is {S}", "{P} asked whether {O} ships to {L}",
    "my colleague {P} at {O} says hi", "tell {P} the {Y} promo ends in {M}", "remind {P}",
    "ask {P} if {O} still ships to {L}", "talked to {P} yesterday, the new {J}",
    "follow up with {P} on {W}", "{P}, {J} at {O}", "{J} {P} will call you",
    "Dear {P}", "Hi {P}", "my manager {P} approved it", "ping {P} about {Y}",
    # Product and interface text.
    "{Y}! save {N}% until {M} {N}", "{Y}: your changes were saved", "pay with {Y}",
    "works best in {Y}", "{Y} is now available", "try {Y} today", "Settings > {Y}",
    "a {J} will call you", "we are hiring a {J}", "{J} on duty from {M} {N}",
    "[{Y}] job {N} failed", "renews {M} {N}", "the {Y} promo ends in {M}",
    "see {Y} for details", "enable {Y} in settings", "{Y} | {Y} | {Y}",
    # Look-alikes and filler.
    "the {X} is {S}", "update the {X} before {W}", "see you on {W}", "the {M} report is late",
    "our {X} subscription renews in {M}", "status: {S}", "{H}", "order {N} is {S}",
    "we will grant access on {W}", "may I ask a question", "prices rose in {M}",
    "mark it as {S}", "the bill is due", "hope that helps", "I will check and get back to you",
    "thanks for your patience", "the {X} team is on it", "please reset my password",
    "the {X} app shows error {N}", "any update?", "see the attached {X} logs",
    "a {N}% discount for {M}", "the {X} and the {X} both ship in {M}", "no change on {D}",
    # Machine noise.
    "timeout after {N}ms", "HTTP {N} from upstream", "retry {N}/5", "release v{N}.{N}.{N}",
    "score {N}", "ref {T}", "Lead {T}", "cpu={N}% mem={N}MB", "region eu-west-{N}",
    "Forwarded message", "Subject: {X} renewal", "From: {P}", "To: {P}", "Re: ticket {T}",
    "see {T} and {T}", "SKU {T} x{N}", "{N} items, total EUR {N}.{N}", "build #{N} failed",
    # Shaped values, which other detectors mask, amid the words that announce them.
    "mail {E}", "email: {E}", "write to {E}", "reply to {E} please", "{P} <{E}>",
    "trace {U}", "request id {U}", "commit {K}", "sha {K} deployed", "ip {I}", "from {I}",
    "call {F}", "phone: {F}", "my number is {F}", "card {R}", "paid with card {R}",
    "iban {B}", "transfer to {B}", "see {Q}", "link: {Q}", "version {V}", "{N} rows",
    "{N},{N} rows exported", "mac {Z}", "meet at {N}:{N}", "ssn {N}-{N}-{N}", "user {G}",
    "login {G} failed", "{P} ({E})", "contact {P} at {F}", "ref {U} for {O}",
]
# Languages whose Faker lorem is a list of the language's words, by locale prefix.
LOREM = {"de": "de_DE", "fr": "fr_FR", "es": "es_ES", "it": "it_IT", "nl": "nl_NL",
         "pl": "pl_PL", "da": "da_DK", "cs": "cs_CZ", "en": "en_US"}

# Capitalised words that open a line or a note and are no entity.
OPENERS = ["Duplicate record", "Possible duplicate", "Internal note", "Follow-up", "Reminder",
           "Update", "Summary", "Note", "Warning", "Resolution", "Reason", "Outcome",
           "Request", "Complaint", "Feedback", "Escalation", "Attachment", "Priority",
           "Callback", "Refund", "Delivery", "Invoice", "Contract", "Meeting", "Visit",
           "Lead", "Handover", "Churn risk", "Account", "Order", "Shipment", "Booking"]

FRAMES = [
    "chat", "chat", "chat", "ticket", "transcript", "email", "email", "crm", "json", "json",
    "json", "yaml", "csv", "xml", "log", "log", "label", "list", "sms",
]
JSON_KEYS = {
    PERSON: ["name", "customer", "contact", "full_name", "owner", "assignee", "requester",
             "agent", "sender", "recipient", "first_name", "last_name", "user", "author",
             "passenger", "patient", "signed_by", "manager", "displayName", "contactName"],
    LOCATION: ["address", "city", "country", "ship_to", "billing_address", "location",
               "region", "destination", "origin", "hq", "town", "addr", "deliveryAddress"],
    ORGANIZATION: ["company", "org", "employer", "account", "vendor", "customer_org",
                   "organization", "supplier", "bank", "companyName", "client"],
    None: ["id", "status", "plan", "product", "note", "priority", "day", "month", "created_at",
           "channel", "tier", "sku", "locale", "currency", "message", "title"],
}


class Text:
    """A text being built, with the spans of what was put in it."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.spans: list[dict] = []
        self.length = 0

    def put(self, piece: str, entity: str | None = None) -> None:
        if entity is not None and piece:
            self.spans.append({"start": self.length, "end": self.length + len(piece), "entity": entity})
        self.parts.append(piece)
        self.length += len(piece)


class Writer:
    def __init__(self, draw: Draw, rng: random.Random):
        self.draw, self.rng = draw, rng

    def value(self, slot: str) -> list[tuple[str, str | None]]:
        d, rng = self.draw, self.rng
        match slot:
            case "P":
                return d.person()
            case "A":
                return [(d.address(), LOCATION)]
            case "C":
                return [(d.city(), LOCATION)]
            case "L":
                return [(d.place(), LOCATION)]
            case "O":
                return [(d.org(), ORGANIZATION)]
            case "W":
                return [(rng.choice(WEEKDAYS), None)]
            case "M":
                months = MONTH_ABBREVIATIONS if rng.random() < 0.3 else MONTHS
                return [(rng.choice(months), None)]
            case "X":
                return [(rng.choice(PRODUCTS), None)]
            case "S":
                return [(rng.choice(STATUSES), None)]
            case "N":
                return [(str(rng.randint(2, 9999)), None)]
            case "D":
                return [(f"{rng.randint(1, 28)}.{rng.randint(1, 12)}.2026", None)]
            case "H":
                return [(rng.choice(HEADINGS), None)]
            case "E":
                return [(d.fake.email(), None)]
            case "U":
                return [(d.fake.uuid4(), None)]
            case "K":
                return [(d.fake.sha1(), None)]
            case "I":
                return [(d.fake.ipv4(), None)]
            case "F":
                return [(d.fake.phone_number(), None)]
            case "R":
                return [(d.fake.credit_card_number(), None)]
            case "B":
                return [(d.fake.iban(), None)]
            case "Q":
                return [(d.fake.url(), None)]
            case "V":
                return [(f"{rng.randint(0, 20)}.{rng.randint(0, 40)}.{rng.randint(0, 9)}", None)]
            case "Z":
                return [(d.fake.mac_address(), None)]
            case "G":
                return [(d.fake.user_name(), None)]
            case "Y":
                return [(rng.choice(INTERFACE), None)]
            case "J":
                return [(d.fake.job().split(",")[0], None)]
            case "T":
                return [(f"{rng.choice(['SUP', 'OPS', 'CRM', 'INC', 'PR'])}-{rng.randint(10, 99999)}", None)]
        raise ValueError(slot)

    def clause(self, out: Text, escape=None) -> None:
        template = self.rng.choice(CLAUSES)
        pos = 0
        for m in re.finditer(r"\{([A-Z])\}", template):
            out.put(template[pos:m.start()])
            for text, entity in self.value(m.group(1)):
                out.put(escape(text) if escape else text, entity)
            pos = m.end()
        out.put(template[pos:])

    def lorem(self, out: Text) -> None:
        """A sentence of the locale's words (or another language's), with an entity or none."""
        rng = self.rng
        lang = self.draw.locale[:2] if rng.random() < 0.7 else rng.choice(list(LOREM))
        words = self.draw.lorem(LOREM.get(lang, "en_US"), rng.randint(3, 12))
        if rng.random() < 0.5:
            words[0] = words[0].capitalize()
        for i in range(len(words)):
            if rng.random() < 0.08:
                words[i] = words[i].capitalize()
        slot = rng.choice("PPACLOWMXN") if rng.random() < 0.7 else None
        at = rng.randint(0, len(words))
        for i, word in enumerate(words):
            if i == at and slot:
                for t, e in self.value(slot):
                    out.put(t, e)
                out.put(" ")
            out.put(word + (" " if i + 1 < len(words) else ""))
        if at == len(words) and slot:
            out.put(" ")
            for t, e in self.value(slot):
                out.put(t, e)

    def sentence(self, out: Text) -> None:
        if self.rng.random() < 0.35:
            self.lorem(out)
            out.put(self.rng.choice([".", ".", "!", "?", ""]))
            return
        n = 1 if self.rng.random() < 0.6 else 2
        for i in range(n):
            if i:
                out.put(self.rng.choice([", and ", "; ", " - ", ", ", " and ", ". "]))
            self.clause(out)
        out.put(self.rng.choice([".", ".", "!", "?", "", " :)"]))

    def prose(self, out: Text, sentences: int) -> None:
        for i in range(sentences):
            if i:
                out.put(self.rng.choice([" ", " ", "\n", "  "]))
            self.sentence(out)

    def entity_value(self, entity: str | None) -> list[tuple[str, str | None]]:
        slot = {PERSON: "P", LOCATION: self.rng.choice("AACL"), ORGANIZATION: "O"}.get(entity)
        if slot is None:
            return self.value(self.rng.choice("WMXSNDH"))
        return [(t, e) for t, e in self.value(slot) if e is not None] or self.value("P")

    def fields(self, count: int) -> list[tuple[str, list[tuple[str, str | None]]]]:
        rng = self.rng
        out = []
        for _ in range(count):
            entity = rng.choice([PERSON, LOCATION, ORGANIZATION, None, None])
            out.append((rng.choice(JSON_KEYS[entity]), self.entity_value(entity)))
        return out

    def frame(self, kind: str, out: Text) -> None:
        rng, d = self.rng, self.draw
        if kind in ("chat", "ticket", "crm") and rng.random() < 0.3:
            out.put(rng.choice(OPENERS) + rng.choice([": ", " - ", ":\n", " | "]))
        if kind == "chat":
            self.prose(out, rng.randint(1, 3))
        elif kind == "sms":
            self.clause(out)
        elif kind == "ticket":
            out.put(f"Ticket #{rng.randint(1000, 99999)} ({rng.choice(STATUSES)})\n")
            out.put("Requester: ")
            for t, e in d.person():
                out.put(t, e)
            out.put("\n")
            self.prose(out, rng.randint(1, 3))
        elif kind == "transcript":
            for turn in range(rng.randint(2, 4)):
                out.put(rng.choice(["Agent: ", "Customer: ", "User: ", "Assistant: "]))
                self.sentence(out)
                out.put("\n")
        elif kind == "email":
            out.put(rng.choice(["Dear ", "Hi ", "Hello ", "Hallo ", "Bonjour ", "Hola ", "Ciao "]))
            for t, e in d.person():
                out.put(t, e)
            out.put(",\n\n")
            self.prose(out, rng.randint(1, 3))
            out.put(rng.choice(["\n\nBest regards,\n", "\n\nThanks,\n", "\n\nCheers\n", "\n\nMit freundlichen Grüßen\n", "\n\nCordialement,\n"]))
            for t, e in d.person():
                out.put(t, e)
            if rng.random() < 0.5:
                out.put("\n")
                out.put(d.org(), ORGANIZATION)
            if rng.random() < 0.3:
                out.put("\n")
                out.put(d.address(), LOCATION)
        elif kind == "crm":
            for key, value in self.fields(rng.randint(2, 5)):
                out.put(key.replace("_", " ").capitalize() + ": ")
                for t, e in value:
                    out.put(t, e)
                out.put("\n")
            self.prose(out, 1)
        elif kind in ("json", "yaml", "xml", "log", "csv"):
            fields = self.fields(rng.randint(1, 5))
            if rng.random() < 0.4:
                fields.append(("message", []))
            if kind == "json":
                nested = rng.random() < 0.2
                q = '\\"' if nested else '"'
                if nested:
                    out.put('{"name":"' + rng.choice(["lookup", "send_email", "crm_update"]) + '","arguments":"')
                out.put("{")
                for i, (key, value) in enumerate(fields):
                    out.put(("," if i else "") + f"{q}{key}{q}:{q}")
                    if value:
                        for t, e in value:
                            out.put(self.escape(t, nested), e)
                    else:
                        self.clause(out, escape=lambda t: self.escape(t, nested))
                    out.put(q)
                out.put("}")
                if nested:
                    out.put('"}')
            elif kind == "yaml":
                for key, value in fields:
                    out.put(f"{key}: ")
                    if value:
                        for t, e in value:
                            out.put(t, e)
                    else:
                        self.clause(out)
                    out.put("\n")
            elif kind == "xml":
                for key, value in fields:
                    out.put(f"<{key}>")
                    if value:
                        for t, e in value:
                            out.put(t.replace("&", "&amp;"), e)
                    else:
                        self.clause(out)
                    out.put(f"</{key}>")
            elif kind == "log":
                out.put(f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z {rng.choice(['INFO', 'WARN', 'ERROR', 'debug'])} {rng.choice(['crm', 'billing', 'geo', 'mailer'])}: ")
                for key, value in fields:
                    if value:
                        quote = '"' if rng.random() < 0.6 else ""
                        out.put(f"{key}={quote}")
                        for t, e in value:
                            out.put(t, e)
                        out.put(f"{quote} ")
                    else:
                        self.clause(out)
                        out.put(" ")
            else:
                out.put(",".join(k for k, _ in fields) + "\n")
                for i, (_, value) in enumerate(fields):
                    if i:
                        out.put(",")
                    quote = '"' if any("," in t for t, _ in value) else ""
                    out.put(quote)
                    for t, e in value or self.value("S"):
                        out.put(t, e)
                    out.put(quote)
        elif kind == "label":
            for t, e in d.person():
                out.put(t, e)
            out.put("\n")
            if rng.random() < 0.5:
                out.put(d.org(), ORGANIZATION)
                out.put("\n")
            out.put(d.address().replace(", ", "\n" if rng.random() < 0.5 else ", "), LOCATION)
        elif kind == "list":
            out.put(rng.choice(HEADINGS) + ":\n")
            for _ in range(rng.randint(2, 4)):
                out.put(rng.choice(["- ", "* ", "• ", "1. "]))
                self.clause(out)
                out.put("\n")

    @staticmethod
    def escape(text: str, nested: bool) -> str:
        text = json.dumps(text, ensure_ascii=False)[1:-1]
        return json.dumps(text, ensure_ascii=False)[1:-1] if nested else text


def lower(record: dict) -> dict:
    text = "".join(c.lower() if len(c.lower()) == 1 else c for c in record["text"])
    return {**record, "text": text}


def generate(texts: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    fakers = {}
    for i, locale in enumerate(LOCALES):
        fake = Faker(locale)
        fake.seed_instance(seed * 1000 + i)
        fakers[locale] = fake
    for i, locale in enumerate(sorted(LOREM.values())):
        LOREM_FAKERS[locale] = Faker(locale)
        LOREM_FAKERS[locale].seed_instance(seed * 1000 + 500 + i)
    records = []
    while len(records) < texts:
        locale = rng.choice(LOCALES)
        text_rng = random.Random(rng.getrandbits(64))
        writer = Writer(Draw(fakers[locale], locale, text_rng), text_rng)
        out = Text()
        kind = text_rng.choice(FRAMES)
        writer.frame(kind, out)
        record = {"text": "".join(out.parts), "spans": out.spans,
                  "meta": {"frame": kind, "locale": locale}}
        # A value that is only spaces or punctuation would be no entity at all.
        record["spans"] = [s for s in record["spans"] if record["text"][s["start"]:s["end"]].strip()]
        r = text_rng.random()
        if r < 0.2:
            record = lower(record)
        elif r < 0.23:
            record = {**record, "text": record["text"].upper()} if len(record["text"].upper()) == len(record["text"]) else record
        records.append(record)
    return records


def main() -> int:
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--texts", type=int, default=40000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="-")
    args = ap.parse_args()
    records = generate(args.texts, args.seed)
    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
    with out:
        for r in records:
            out.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"corpus: {len(records)} texts, {sum(len(r['spans']) for r in records)} spans",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
