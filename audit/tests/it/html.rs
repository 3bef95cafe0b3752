//! Reading the console's pages the way a browser would, enough to check what recorded data
//! can reach: the attributes of every tag (entity-decoded), every link and form target, and
//! where a piece of text sits. The console's templates always quote attributes with `"`.

/// The console's paths a link or form may target.
const PATHS: [&str; 10] = [
    "/search",
    "/audit",
    "/training",
    "/logout",
    "/login",
    "/trajectory",
    "/trajectory/export",
    "/trajectory/text",
    "/reveal",
    "",
];

/// The classes the console's stylesheet defines: the only class names a page may use.
pub const CLASSES: [&str; 33] = [
    "who",
    "filters",
    "primary",
    "inline",
    "line",
    "link",
    "muted",
    "mono",
    "tag",
    "status-ok",
    "status-bad",
    "pii",
    "entity",
    "step",
    "hit",
    "meta",
    "msg",
    "content",
    "role",
    "role-system",
    "role-developer",
    "role-user",
    "role-assistant",
    "role-tool",
    "role-other",
    "call",
    "cut",
    "reward",
    "banner",
    "ok",
    "bad",
    "revealed",
    "pager",
];

/// `text` with the character references the console writes decoded.
pub fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(end) = rest.find(';') else { break };
        let entity = &rest[1..end];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            e if e.starts_with('#') => e[1..].parse::<u32>().ok().and_then(char::from_u32),
            _ => None,
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Every `name="value"` attribute of every tag of `html`, values decoded, with the tag name.
pub fn attributes(html: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(at) = rest.find('<') {
        rest = &rest[at + 1..];
        let Some(end) = rest.find('>') else { break };
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if tag.starts_with('/') || tag.starts_with('!') {
            continue;
        }
        let name = tag.split_whitespace().next().unwrap_or_default().to_owned();
        let mut attrs = &tag[name.len()..];
        while let Some(eq) = attrs.find("=\"") {
            let key = attrs[..eq]
                .trim()
                .rsplit(' ')
                .next()
                .unwrap_or_default()
                .to_owned();
            let value_start = eq + 2;
            let Some(len) = attrs[value_start..].find('"') else {
                break;
            };
            let value = unescape(&attrs[value_start..value_start + len]);
            out.push((name.clone(), key, value));
            attrs = &attrs[value_start + len + 1..];
        }
    }
    out
}

/// The targets of every link and form of `html`.
pub fn links(html: &str) -> Vec<String> {
    attributes(html)
        .into_iter()
        .filter(|(_, key, _)| key == "href" || key == "action")
        .map(|(_, _, value)| value)
        .collect()
}

/// Decodes `%XX` escapes (the test's own decoding, to compare with what was recorded).
pub fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
            out.push(u8::from_str_radix(hex, 16).unwrap());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// Panics unless `url` is one of the console's own paths, with a query of `name=value`
/// pairs whose values are strictly percent-encoded (nothing but unreserved characters and
/// `%XX`), and at most a fragment of the console's own (`#hit`, `#step-N`).
pub fn assert_strict(url: &str) {
    let (rest, fragment) = url.split_once('#').unwrap_or((url, ""));
    assert!(
        fragment.is_empty()
            || fragment == "hit"
            || fragment
                .strip_prefix("step-")
                .is_some_and(|n| n.parse::<usize>().is_ok()),
        "{url:?}: fragment"
    );
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    assert!(PATHS.contains(&path), "{url:?}: path {path:?}");
    if path.is_empty() {
        assert!(query.is_empty() && !fragment.is_empty(), "{url:?}");
    }
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair
            .split_once('=')
            .unwrap_or_else(|| panic!("{url:?}: {pair:?}"));
        assert!(
            name.bytes().all(|b| b.is_ascii_lowercase()),
            "{url:?}: {name:?}"
        );
        let bytes = value.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => i += 1,
                b'%' if i + 3 <= bytes.len()
                    && bytes[i + 1..i + 3].iter().all(|b| b.is_ascii_hexdigit()) =>
                {
                    i += 3
                }
                other => panic!("{url:?}: {:?} is not encoded in {name}", char::from(other)),
            }
        }
    }
}

/// The decoded value of query parameter `name` of `url`.
pub fn query_value(url: &str, name: &str) -> Option<String> {
    let query = url.split('#').next()?.split_once('?')?.1;
    query
        .split('&')
        .filter_map(|p| p.split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| percent_decode(v))
}

/// The targets of `html`'s links and forms whose path is `path`.
pub fn targets(html: &str, path: &str) -> Vec<String> {
    links(html)
        .into_iter()
        .filter(|u| u.split(['?', '#']).next() == Some(path))
        .collect()
}

/// Panics unless every occurrence of `marker` in the text of `html` (not in a tag's
/// attributes, which [`attributes`] checks) is directly inside a `<bdi>`: the last tag before
/// it opens a `<bdi>`.
pub fn assert_isolated(html: &str, marker: &str, what: &str) {
    let mut found = 0;
    for (at, _) in html.match_indices(marker) {
        let before = &html[..at];
        if before.rfind('<') > before.rfind('>') {
            continue;
        }
        found += 1;
        let tag = before.rfind('<').map(|t| &before[t..]).unwrap_or_default();
        assert!(
            tag.starts_with("<bdi>"),
            "{what}: {marker:?} outside <bdi>: …{}…",
            &html[at.saturating_sub(120)..(at + 60).min(html.len())]
        );
    }
    assert!(found > 0, "{what}: {marker:?} not on the page");
}

/// The text of the first `<h1>`'s `<bdi>` (the id a trajectory page shows), decoded.
pub fn heading_id(html: &str) -> Option<String> {
    let h1 = &html[html.find("<h1>")?..];
    let h1 = &h1[..h1.find("</h1>")?];
    let start = h1.find("<bdi>")? + "<bdi>".len();
    let end = start + h1[start..].find("</bdi>")?;
    Some(unescape(&h1[start..end]))
}
