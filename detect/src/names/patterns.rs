//! The patterns of addresses and organisations.

/// A street word, its name and its number in one of the European orders, then an optional
/// postcode and city.
pub(super) const CAP: &str = r"[\p{Lu}&&\p{Latin}][\p{Latin}'’.-]*";
pub(super) const POSTCODE_CITY: &str = r"(?:(?:,[ \t]*|[ \t]+|,?[ \t]*\n[ \t]*)(?:\d{5}|\d{4}\s?[A-Z]{2}|\d{2}-\d{3}|\d{4}-\d{3}|\d{3}\s\d{2}|(?i:[A-Z]{1,2}\d[A-Z\d]?\s\d[A-Z]{2})|\d{4})[ \t]+[\p{Lu}&&\p{Latin}][\p{Ll}&&\p{Latin}][\p{Latin}'’-]*(?:[ -](?:(?:am|an|der|de|di|del|sur|upon)[ ])?[\p{Lu}&&\p{Latin}][\p{Ll}&&\p{Latin}][\p{Latin}'’-]*){0,2}|,[ \t]+[\p{Lu}&&\p{Latin}][\p{Ll}&&\p{Latin}][\p{Latin}'’-]*(?:[ -][\p{Lu}&&\p{Latin}][\p{Ll}&&\p{Latin}][\p{Latin}'’-]*){0,2}(?:,?[ \t]+(?:(?i:[A-Z]{2})[ \t]+\d{5}(?:-\d{4})?|(?i:[A-Z]{1,2}\d[A-Z\d]?\s\d[A-Z]{2})|\d{5}))?)?";

pub(super) fn address_patterns() -> Vec<String> {
    let english = r"(?:Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Way|Place|Pl|Square|Sq|Terrace|Close|Crescent|Parkway|Pkwy|Highway|Hwy|Row|Hill|Gardens|Grove|Mews|Walk|Circle|Trail|Loop|Path|Park|Green|Rise|View|Port|Ports|Fields|Heights|Meadows|Plains|Ridge|Springs|Valley|Village|Ville|Wells|Extension|Junction|Landing|Pass|Point|Station|Summit|Track|Turnpike|Union|Via|Vista|Alley|Bridge|Brook|Burg|Camp|Cape|Center|Centre|Club|Common|Corner|Creek|Crossing|Dale|Dam|Divide|Estate|Falls|Ferry|Field|Flat|Ford|Forest|Fork|Fort|Freeway|Garden|Gateway|Glen|Harbor|Haven|Island|Isle|Key|Knoll|Lake|Lakes|Light|Lodge|Manor|Mill|Mills|Mission|Motorway|Mount|Mountain|Neck|Orchard|Oval|Pike|Pine|Pines|Plaza|Prairie|Radial|Ranch|Rapids|Rest|River|Run|Shoal|Shore|Shores|Skyway|Spring|Spur|Stream|Throughway|Trace|Tunnel|Underpass|Viaduct)";
    let unit = r"(?:,?[ \t]+(?:Apt\.?|Apartment|Suite|Ste\.?|Unit|Flat|Floor|Fl\.?|#|Piano|Appartamento|Interno|Int\.|Scala|Piso|Puerta|Escalera|Bajo|Apto\.?|Étage|Etage|Bâtiment|Wohnung|Whg\.|lok\.|m\.|Andar|Dto\.?|Esq\.?|lgh|tr\.?)[ \t]*[\w-]+º?)?";
    // Flat 3, / Studio 7, before a street without a number of its own.
    let before = r"(?:(?:Flat|Studio|Unit|Apartment|Suite)[ \t]+\d{1,4}[A-Za-z]?,[ \t]+)";
    let germanic = r"(?:straße|strasse|str\.|weg|gasse|platz|allee|ring|damm|ufer|steig|pfad|chaussee|markt|straat|laan|gracht|plein|kade|singel|dijk|dreef|gatan|vägen|väg|gränd|torget|gade|vej|veien|gata|gaten|hof|erf|steeg|baan|plantsoen|oord|pad|weide|kamp|horst|dal|berg|park)";
    let romance = r"(?:rue|avenue|av\.?|boulevard|bd|place|allée|chemin|impasse|quai|cours|route|calle|c/|c\.|avenida|avda\.?|plaza|paseo|pasaje|callejón|cuesta|glorieta|urbanización|rambla|vía|carretera|carrer|camino|ronda|travesía|via|viale|piazza|piazzale|corso|largo|vicolo|strada|stretto|contrada|borgo|rotonda|rua|travessa|praça|estrada|alameda|avenida|beco|largo|ulica|ul\.|aleja|al\.|plac|pl\.|osiedle|os\.|acceso|bajada|cañada|pasadizo|ruta|salida)";
    let joins = r"(?:[ \t]+(?:de[ \t]+la|de[ \t]+l'|de[ \t]+los|de[ \t]+las|del|de|des|du|d'|di|della|dei|degli|da|do|dos|das|e|y|i|la|le|les|el)(?-u:\b))?";
    vec![
        // 12 Baker Street, Flat 3, London NW1 6XE; 1600 Pennsylvania Ave NW, Washington, DC 20500
        format!(
            r"(?-u:\b)(?:{before}|\d{{1,5}}[A-Za-z]?[ \t]+|{before}\d{{1,5}}[A-Za-z]?[ \t]+)(?:{CAP}[ \t]+){{0,3}}{CAP}[ \t]+{english}s?(?-u:\b)\.?(?:[ \t]+(?:NW|NE|SW|SE|N|S|E|W)(?-u:\b))?{unit}{POSTCODE_CITY}"
        ),
        // Hauptstraße 12a, 10115 Berlin; Keizersgracht 123, 1015 CJ Amsterdam; Drottninggatan 5
        format!(
            r"(?-u:\b)[\p{{Lu}}&&\p{{Latin}}][\p{{Latin}}-]*(?:{germanic}|[ \t-](?:Straße|Strasse|Str\.|Weg|Gasse|Platz|Allee|Ring|Damm|Ufer|Chaussee|Markt))[ \t]+\d{{1,4}}(?:[ \t]?[a-zA-Z])?(?-u:\b)(?:[ \t]*[-/][ \t]*\d{{1,4}})?{unit}{POSTCODE_CITY}"
        ),
        // Am Markt 3 / Unter den Linden 5 style: a street of separate words before a number.
        format!(
            r"(?-u:\b)(?:Am|An der|Auf der|Im|In der|Unter den|Zum|Zur)[ \t]+{CAP}(?:[ \t]+{CAP})?[ \t]+\d{{1,4}}[a-z]?(?-u:\b){POSTCODE_CITY}"
        ),
        // 12, rue de la Paix, 75002 Paris; Calle Mayor 5, 28013 Madrid; Via Roma 10, 00184 Roma
        format!(
            r"(?i:(?-u:\b)(?:\d{{1,4}}(?:[ \t]?(?:bis|ter))?,?[ \t]+)?{romance}){joins}[ \t]*{CAP}(?:[ \t]+(?:{CAP}|de|del|di|da|do|la|le|e|y)){{0,4}}(?:,?[ \t]+(?:n\.?º?[ \t]*)?(?:\d{{1,4}}[A-Za-z]?|S/N)(?-u:\b)(?:[ \t]*[-/][ \t]*\d{{1,4}}(?-u:\b))?)?{unit}{POSTCODE_CITY}"
        ),
        // 44343 Garcia Hollow Apt. 200, Patriciastad, KS 28900: any street word before a
        // state and ZIP code.
        format!(
            r"(?-u:\b)\d{{1,5}}[ \t]+(?:{CAP}[ \t]+){{0,3}}{CAP}{unit},[ \t]+{CAP}(?:[ \t]+{CAP}){{0,2}},[ \t]+[A-Z]{{2}}[ \t]+\d{{5}}(?:-\d{{4}})?(?-u:\b)"
        ),
    ]
}

/// Where an organisation starts: at the text's start, at an ASCII word boundary, or after a
/// character that is not part of a word, which the match then holds and
/// [`super::matched`] trims off (the ASCII boundary alone never matches before a capital
/// outside ASCII: `Ūdris, Teicāns un Alksnis`; a Unicode boundary would keep the patterns
/// off the lazy DFA).
const START: &str = r"(?:^|(?-u:\b)|[^\p{L}\p{N}_])";

/// Organisations in lower-case text: words before a legal form (leading common words are
/// trimmed off afterwards).
pub(super) fn lower_organization_patterns() -> Vec<String> {
    let legal = r"(?:plc|ltd|llc|gmbh|ag|kg|nv|n\.v\.|bv|b\.v\.|sa|s\.a\.|sas|s\.a\.s\.|sarl|s\.a\.r\.l\.|srl|s\.r\.l\.|spa|s\.p\.a\.|ab|oy|lda|inc|corp|sp\.\s?z\s?o\.\s?o\.|sp\.\s?k\.|s\.l\.|ug|eurl|sasu|kft|s\.r\.o\.|oü|ltda|llp|pllc|pty\s+ltd|aktiebolag|group|groep|gruppe|grupo|gruppo|holdings|holding|e\s+figli|et\s+fils|and\s+sons|e\s+filhos|e\s+hijos|y\s+asociados|&\s+zonen|en\s+zonen)";
    vec![
        format!(
            r"{START}((?:[\p{{Ll}}&&\p{{Latin}}][\p{{Latin}}'’-]*(?:,[ ]+|[ ]+(?:and|&|e|et|y|en|und|och|i)[ ]+|[ ]+|-)){{1,2}}{legal})(?:\s|$|[,.;:!?)\]}}<]|\x22)"
        ),
        // smith, jones and brown
        format!(
            r"{START}([\p{{Ll}}&&\p{{Latin}}]{{3,}}, [\p{{Ll}}&&\p{{Latin}}]{{3,}},? (?:and|&|e|et|y|en|und|och|i) [\p{{Ll}}&&\p{{Latin}}]{{3,}})(?-u:\b)"
        ),
    ]
}

/// Organisations written in lower case inside text with capitals (`I work at acme ltd`): one
/// or two words before a lower-case legal form that is no word of its own (leading common
/// words are trimmed off afterwards).
pub(super) fn mixed_lower_organization_patterns() -> Vec<String> {
    let legal = r"(?:ltd|llc|llp|pllc|inc|gmbh|plc|ug|kft|sarl|srl|bvba|aps|oyj|s\.r\.o\.|sp\.\s?z\s?o\.\s?o\.|s\.a\.|s\.r\.l\.|s\.l\.|s\.c\.|b\.v\.|n\.v\.|s\.p\.a\.|a/s)";
    vec![format!(
        r"{START}((?:[\p{{Ll}}&&\p{{Latin}}][\p{{Latin}}'’-]*(?:[ ]+|-)){{1,2}}{legal})(?:\s|$|[,.;:!?)\]}}<]|\x22)"
    )]
}

pub(super) fn organization_patterns() -> Vec<String> {
    let legal = r"(?:Inc\.?|Incorporated|Corp\.?|Corporation|Ltd\.?|Limited|LLC|L\.L\.C\.|LLP|PLC|plc|GmbH(?:\s&\sCo\.\s(?:KG|OHG))?|gGmbH|AG|KGaA|KG|OHG|GbR|e\.\s?V\.|eG|e\.G\.|SE|SA|S\.A\.|SAS|S\.A\.S\.|SARL|S\.A\.R\.L\.|SNC|S\.L\.|SL|S\.Coop\.?|S\.r\.l\.|s\.r\.l\.|Srl|S\.p\.A\.|SpA|SPA|s\.p\.a\.|s\.n\.c\.|s\.a\.s\.|BV|B\.V\.|NV|N\.V\.|VOF|V\.O\.F\.|CV|AB|HB|KB|ASA|AS|A/S|ApS|Oy|Oyj|Lda\.?|S\.A\.U\.|Sp\.\s?z\s?o\.\s?o\.(?:\s+Sp\.\s?k\.)?|z\s?o\.\s?o\.?|Sp\.\s?k\.|Sp\.\s?j\.|S\.K\.A\.|sp\.\s?j\.|s\.c\.|S\.C\.|S\.L\.U\.|S\.A\.T\.|S/A|S\.C\.P\.?|S\.Com\.|mbH|OHG\s+mbH|UG(?:\s\(haftungsbeschränkt\))?|EURL|EIRL|EI|SASU|SCA|SCS|SKA|SRL|S\.R\.L\.|Sàrl|S\.à\s?r\.l\.|SPRL|BVBA|CVBA|SCRL|ASBL|VZW|SIA|UAB|OÜ|MTÜ|Aktiebolag|Handelsbolag|Kommanditbolag|s\.r\.o\.|spol\.\s?s\s?r\.\s?o\.|a\.\s?s\.|v\.\s?o\.\s?s\.|k\.\s?s\.|Kft\.?|Zrt\.?|Nyrt\.?|Bt\.?|d\.o\.o\.|d\.d\.|Ltda\.?|Pty\.?\s+Ltd\.?|Pvt\.?\s+Ltd\.?|PLLC|LP|L\.P\.|IVS|K/S|P/S|I/S|Tmi|AE|A\.E\.|EPE|IKE|ehf\.?|hf\.?|Co\.|Company|Agency|Agentur|Agence|Aģentūra|aģentūra|Verlag|Werke|Consult|Consultants|Rechtsanwälte|Advocaten|Avocats|Abogados|Avvocati|Group|Holding|Holdings|Partners|Associates|Technologies|Technology|Systems|Solutions|Labs|Laboratories|Industries|Consulting|Logistics|Foundation|Trust|Bank|Insurance|Capital|Ventures|Media|Software|Pharma|Motors|Airlines|Hotels|Enterprises|Investments?|Gruppe|Grupp|International|Worldwide|Services|e\s+[Ff]igli|et\s+[Ff]ils|Brothers|Bros\.|Hermanos|un\s+[Pp]artneri|&\s+(?:Sons|Zonen|Söhne|Co\.?(?:\s+(?:KG|OHG|KGaA))?)|and\s+Sons|e\s+[Hh]ijos|(?:y|&)\s+[Aa]sociados(?:\s+S\.[\p{Lu}&&\p{Latin}]\.(?:[\p{Lu}&&\p{Latin}]\.)?)?|e\s+[Ff]ilhos|&\s+[Ff]ilhos|en\s+[Zz]onen|und\s+Söhne)";
    let name = r"[\p{Lu}&&\p{Latin}][\p{Latin}'’&-]*(?:\.\p{Latin}[\p{Latin}'’&-]*)*";
    // Names of one line: words, or a list that ends in a conjunction (`Smith, Jones and
    // Brown`), never a comma alone (`Head of Operations, Jansson HB` is a title and a name).
    let and = r"(?:&|and|und|et|y|e|en|och|i|og|un|ve|és)";
    let words = format!(r"(?:(?:{name}[ \t]+|{name}-){{0,3}}{name})");
    let joiner = format!(r"(?:(?:,[ \t]+{name})*,?[ \t]+{and}[ \t]+|[ \t]+|-)");
    let prefix = r"(?:SIA|AS|UAB|VšĮ|Biedrība|FPUH|PPUH|PHU|PPHU|Gabinety|Finanzas|Stowarzyszenie|Fundacja|Spółka|Grupo|Grupa|Gruppo|Groupe|Industrias|Compañía|Banco|Banca|Hermanos|Spółdzielnia|Przedsiębiorstwo|Firma|Stichting|Fundación|Fondazione|Fondation|Laboratorios|Laboratoires|Studio|Agencia|Agenzia|Agence|Construcciones|Transportes|Inversiones|Comercial|Distribuciones)";
    vec![
        format!(
            r"{START}((?:{name}(?:,[ \t]+{name})*,?[ \t]+{and}[ \t]+{words}|{words}),?[ \t]+{legal})(?:\s|$|[,.;:!?)\]}}<]|\x22)"
        ),
        // Smith, Jones and Brown: three names, as partnerships are named.
        format!(r"{START}({name},[ \t]+{name},?[ \t]+{and}[ \t]+{name})"),
        format!(
            r"{START}{prefix}[ \t]+(?:(?:de|del|di|della|des|du)[ \t]+)?{name}(?:{joiner}{name}){{0,2}}"
        ),
        format!(
            r"{START}(?:University|Universit(?:y|é|à|ät|eit|at|ad|ade|et)|Bank|Institute|Institut|Instituto|Istituto|College|Hospital|Hôpital|Ospedale|Klinikum|Museum|Ministry)\s+(?:of|de|di|du|des|del|della|für|van|voor|i|w)\s+(?:the\s+)?{name}(?:\s+{name}){{0,2}}"
        ),
    ]
}
