#!/usr/bin/env node
// The second, independent yardstick for names, places and organisations: a labelled corpus of
// agent traffic from another generator (@faker-js/faker, not Python's Faker), with its own
// templates and its own name, street and company lists, in twelve locales, two of which no
// training corpus of the tagger uses (en_NG, lv; en_IN and tr are trained on from Python
// Faker's lists, which are others). Nothing this program writes is ever trained on: it
// measures how far the detectors carry to text of another generator.
//
// Each line of the output is one text with the truth of every inserted entity, as character
// offsets (UTF-16 code units here, converted to code points before writing, which is what
// detect/bench/ner/score.py reads):
//
//   {"text": "...", "spans": [{"start": 10, "end": 18, "entity": "PERSON"}],
//    "meta": {"template": "crm.followup", "category": "crm", "locale": "tr"}}
//
// PERSON is a full, given or family name without its title; LOCATION a street address as one
// span, a city, a region or a country; ORGANIZATION a company. The `ui` templates are hard
// negatives: product names, feature names, interface labels, month abbreviations, card
// brands, browser names and job titles, which must not be reported.
//
//   node generate.mjs --texts 1500 --seed 5 --out corpus.jsonl
import { writeFileSync } from "node:fs";
import { argv, exit, stderr } from "node:process";

import {
  fakerDE, fakerEN_GB, fakerEN_IN, fakerEN_NG, fakerEN_US, fakerES, fakerFR, fakerIT, fakerLV,
  fakerPL, fakerSV, fakerTR,
} from "@faker-js/faker";

const LOCALES = {
  en_US: fakerEN_US, en_GB: fakerEN_GB, en_IN: fakerEN_IN, en_NG: fakerEN_NG, de: fakerDE,
  fr: fakerFR, es: fakerES, it: fakerIT, pl: fakerPL, sv: fakerSV, tr: fakerTR, lv: fakerLV,
};

// Titles as each language writes them before a name: [male, female].
const TITLES = {
  en_US: [["Mr.", "Mr", "Dr."], ["Mrs.", "Ms.", "Ms", "Mrs", "Dr."]],
  en_GB: [["Mr", "Mr.", "Dr"], ["Mrs", "Ms", "Miss", "Dr"]],
  en_IN: [["Mr.", "Shri", "Dr."], ["Mrs.", "Ms.", "Smt."]],
  en_NG: [["Mr.", "Chief", "Dr."], ["Mrs.", "Ms."]],
  de: [["Herr", "Herrn", "Dr."], ["Frau"]],
  fr: [["M.", "Monsieur"], ["Mme", "Madame", "Mlle"]],
  es: [["Sr.", "Don", "señor"], ["Sra.", "Doña", "señora"]],
  it: [["Sig.", "signor", "Dott."], ["Sig.ra", "signora", "Dott.ssa"]],
  pl: [["pan", "Pan", "dr"], ["pani", "Pani"]],
  sv: [["herr"], ["fru"]],
  tr: [["Bay", "Sayın"], ["Bayan", "Sayın"]],
  lv: [["kungs"], ["kundze"]],
};

// Hard negatives: words of product and interface text that look like names.
const UI = [
  "Summer Sale", "New Feature", "Success", "Terms of Service", "Visa", "Mastercard", "Chrome",
  "Firefox", "Safari", "Edge", "Opera", "Dark Mode", "Quick Actions", "Smart Compose",
  "Black Friday", "Cyber Monday", "Apple Pay", "Google Pay", "PayPal", "Amex", "Discover",
  "Insights", "Dashboard", "Settings", "Checkout", "Wishlist", "Gift Card", "Loyalty Points",
  "Early Access", "Spring Collection", "Winter Clearance", "Privacy Policy", "Help Center",
  "Order History", "Two-Factor Authentication", "Single Sign-On", "Release Candidate",
  "Autopilot", "Workspace", "Guest Checkout", "Express Shipping", "Premium Support",
];
const MONTHS = ["Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug", "Sep", "Sept", "Oct", "Nov", "Dec"];
const BROWSERS = ["Chrome", "Firefox", "Safari", "Edge", "Brave", "Opera", "Vivaldi"];
const CARDS = ["Visa", "Mastercard", "Amex", "Maestro", "Discover", "UnionPay", "JCB"];
const LEVELS = ["alert", "warn", "error", "notice", "info", "critical"];

// {P1} full name, {P1.first}, {P1.last}, {P1.title} (unlabelled); {ADDR} {CITY} {REGION}
// {COUNTRY} {ORG}: entities; {JOB} {PRODUCT} {UI} {MON} {BROWSER} {CARD} {DEPT} {LEVEL}
// {NUM} {ID} {DAY} {TIME} {TS}: fillers and look-alikes.
const T = (id, category, text, lower = false) => ({ id, category, text, lower });
const TEMPLATES = [
  T("crm.followup", "crm", "Follow up on {DAY} with {P1} about the {PRODUCT} order; {P1.title} {P1.last} prefers calls after {TIME}."),
  T("crm.meeting", "crm", "Met {P1} ({JOB}) at the {ORG} office in {CITY}. Next step: demo of {UI} for {P2.first}'s team."),
  T("crm.record", "crm", "Contact: {P1}\nCompany: {ORG}\nTitle: {JOB}\nMailing address: {ADDR}\nSource: {UI} campaign"),
  T("crm.handoff", "crm", "Handed {ORG} over to {P1.first}. {P2.title} {P2.last} asked for a {CARD} invoice, billing in {COUNTRY}."),
  T("crm.note", "crm", "{TS} note by {P1.first}: {P2} wants to move the {ORG} renewal to {MON}. Lives in {CITY}, {REGION}."),
  T("chat.colleague", "chat", "my colleague {P1} at {ORG} said the {UI} page is broken in {BROWSER}", true),
  T("chat.intro", "chat", "hi, my name is {P1} and i moved to {CITY} last month, can you update my address to {ADDR}", true),
  T("chat.ask", "chat", "can you ask {P1.first} if {ORG} still ships to {COUNTRY}? thx", true),
  T("chat.thanks", "chat", "thanks {P1.first}! also tell {P2} the {UI} promo ends in {MON}", true),
  T("chat.mixed", "chat", "ok so i talked to {P1} yesterday, she is the new {JOB} at {ORG}", true),
  T("log.kv", "log", "{TS} {LEVEL} billing: charge declined for customer=\"{P1}\" card={CARD} country={COUNTRY} id={ID}"),
  T("log.agent", "log", "{TS} INFO agent.tool lookup_contact name=\"{P1}\" result=found org=\"{ORG}\" city=\"{CITY}\""),
  T("log.alert", "log", "[{LEVEL}] {TS} {UI} job failed; owner {P1.first} notified; retry {NUM}/5"),
  T("log.ship", "log", "{TS} shipment {ID} to {ADDR} handed to courier, contact {P1.title} {P1.last}"),
  T("mail.dear", "email", "Dear {P1.title} {P1.last},\n\nyour {UI} request for {ORG} was approved.\n\nBest regards,\n{P2}\n{JOB}"),
  T("mail.hi", "email", "Hi {P1.first},\n\nthe {PRODUCT} you ordered ships from {CITY} on {DAY}.\n\nCheers,\n{P2.first}"),
  T("mail.title", "email", "{P1.title} {P1.last},\n\nwe could not deliver to {ADDR}. Please call us.\n\nKind regards, {ORG}"),
  T("mail.full", "email", "Hello {P1.title} {P1},\nthank you for choosing {ORG}. Your {CARD} ending {NUM} was charged.\n— {P2}, {DEPT}"),
  T("json.contact", "json", '{"tool":"crm.get_contact","result":{"full_name":"{P1}","job_title":"{JOB}","company":"{ORG}","city":"{CITY}"}}'),
  T("json.order", "json", '{"order_id":"{ID}","buyer":{"given":"{P1.first}","family":"{P1.last}"},"deliver_to":"{ADDR}","payment":"{CARD}","promo":"{UI}"}'),
  T("json.search", "json", '{"results":[{"name":"{ORG}","country":"{COUNTRY}"},{"name":"{P1}","role":"{JOB}"}],"browser":"{BROWSER}"}'),
  T("json.event", "json", '{"type":"{LEVEL}","message":"{P1} signed in from {CITY}","client":"{BROWSER}","month":"{MON}"}'),
  T("ui.banner", "ui", "{UI}! Save up to {NUM}% until {MON} {NUM2}. Pay with {CARD} or {CARD2}. Works best in {BROWSER}."),
  T("ui.release", "ui", "New Feature: {UI}. Success: your {PRODUCT} settings were saved. See Terms of Service for details."),
  T("ui.jobs", "ui", "We are hiring: {JOB} ({DEPT}). A technician will call you; {JOB2} on duty from {MON} {NUM}."),
  T("ui.labels", "ui", "Settings > {UI} > {DEPT}\nSuccess\nAlert: {LEVEL} threshold reached in {BROWSER}\nCard: {CARD}\nRenews: {MON} {NUM}"),
  T("ui.product", "ui", "The {PRODUCT} is back in stock. {UI} members get free shipping; {PRODUCT2} ships in {MON}."),
];

// A seeded generator (mulberry32), so that the same --seed gives the same corpus.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function values(faker, locale, random) {
  const pick = (list) => list[Math.floor(random() * list.length)];
  const people = {};
  const cache = {};
  const person = (key) => {
    if (!people[key]) {
      const sex = random() < 0.5 ? "female" : "male";
      people[key] = {
        first: faker.person.firstName(sex),
        last: faker.person.lastName(sex),
        title: pick(TITLES[locale][sex === "male" ? 0 : 1]),
      };
    }
    return people[key];
  };
  const address = () => {
    const street = faker.location.streetAddress(random() < 0.3);
    const city = faker.location.city();
    const zip = faker.location.zipCode();
    if (locale === "en_US") return `${street}, ${city}, ${faker.location.state({ abbreviated: true })} ${zip}`;
    if (locale === "en_GB" || locale === "en_IN" || locale === "en_NG") return `${street}, ${city} ${zip}`;
    return `${street}, ${zip} ${city}`;
  };
  const company = () => {
    for (let i = 0; i < 10; i++) {
      const name = faker.company.name();
      if (name.includes(" ")) return name;
    }
    return `${faker.person.lastName()} Holdings`;
  };
  const filler = {
    ADDR: [address, "LOCATION"], CITY: [() => faker.location.city(), "LOCATION"],
    REGION: [() => faker.location.state(), "LOCATION"], COUNTRY: [() => faker.location.country(), "LOCATION"],
    ORG: [company, "ORGANIZATION"], JOB: [() => faker.person.jobTitle(), null],
    PRODUCT: [() => faker.commerce.productName(), null], UI: [() => pick(UI), null],
    MON: [() => pick(MONTHS), null], BROWSER: [() => pick(BROWSERS), null], CARD: [() => pick(CARDS), null],
    DEPT: [() => faker.commerce.department(), null], LEVEL: [() => pick(LEVELS), null],
    NUM: [() => String(1 + Math.floor(random() * 90)), null],
    ID: [() => `${pick(["ORD", "INV", "SHP"])}-${100000 + Math.floor(random() * 900000)}`, null],
    DAY: [() => pick(["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]), null],
    TIME: [() => `${8 + Math.floor(random() * 10)}:${pick(["00", "15", "30", "45"])}`, null],
    TS: [() => new Date(Date.UTC(2026, 0, 1) + Math.floor(random() * 3e10)).toISOString(), null],
  };
  return (slot) => {
    const m = /^P(\d)(?:\.(first|last|title))?$/.exec(slot);
    if (m) {
      const p = person(m[1]);
      const part = m[2] || "full";
      if (part === "title") return [p.title, null];
      return [part === "full" ? `${p.first} ${p.last}` : p[part], "PERSON"];
    }
    const base = slot.replace(/\d+$/, "");
    const [make, entity] = filler[base];
    if (!(slot in cache)) cache[slot] = make().replace(/\s+/g, " ").trim();
    return [cache[slot], entity];
  };
}

function render(template, slot) {
  const json = template.category === "json";
  let text = "";
  const spans = [];
  let pos = 0;
  const emit = (piece, entity) => {
    if (template.lower) piece = [...piece].map((c) => (c.toLowerCase().length === c.length ? c.toLowerCase() : c)).join("");
    if (entity) spans.push({ start: [...text].length, end: [...text].length + [...piece].length, entity });
    text += piece;
  };
  for (const m of template.text.matchAll(/\{([A-Za-z0-9.]+)\}/g)) {
    emit(template.text.slice(pos, m.index), null);
    let [value, entity] = slot(m[1]);
    if (json) value = JSON.stringify(value).slice(1, -1);
    emit(value, entity);
    pos = m.index + m[0].length;
  }
  emit(template.text.slice(pos), null);
  // A title before a full name that starts with it again (`Mr. Mr. …`) cannot happen; a
  // title left without a name after it can, and is not an entity either way.
  return { text, spans };
}

function main() {
  const args = { texts: 1500, seed: 5, out: "-" };
  for (let i = 2; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, "");
    if (!(key in args)) {
      stderr.write(`usage: generate.mjs [--texts N] [--seed S] [--out FILE]\n`);
      exit(2);
    }
    args[key] = key === "out" ? argv[i + 1] : Number(argv[i + 1]);
  }
  const random = rng(args.seed);
  const locales = Object.keys(LOCALES);
  const lines = [];
  let spans = 0;
  for (let n = 0; n < args.texts; n++) {
    const template = n < TEMPLATES.length ? TEMPLATES[n] : TEMPLATES[Math.floor(random() * TEMPLATES.length)];
    const locale = locales[Math.floor(random() * locales.length)];
    const faker = LOCALES[locale];
    faker.seed(args.seed * 100003 + n);
    const record = render(template, values(faker, locale, rng(args.seed * 7919 + n)));
    spans += record.spans.length;
    lines.push(JSON.stringify({ ...record, meta: { template: template.id, category: template.category, locale } }));
  }
  const body = lines.join("\n") + "\n";
  if (args.out === "-") process.stdout.write(body);
  else writeFileSync(args.out, body);
  stderr.write(`yardstick: ${args.texts} texts, ${spans} spans, ${TEMPLATES.length} templates, ${locales.length} locales\n`);
}

main();
