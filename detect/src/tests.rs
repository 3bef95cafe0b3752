use super::*;

fn found(text: &str) -> Vec<(&'static str, String)> {
    let scanner = Scanner::new(None).unwrap();
    scanner
        .scan(text)
        .into_iter()
        .map(|s| (s.entity, text[s.start..s.end].to_owned()))
        .collect()
}

fn assert_finds(entity: &str, text: &str, value: &str) {
    let spans = found(text);
    assert!(
        spans.iter().any(|(e, v)| *e == entity && v == value),
        "expected {entity} {value:?} in {text:?}, found {spans:?}"
    );
}

fn assert_clean(text: &str) {
    let spans = found(text);
    assert!(
        spans.is_empty(),
        "expected nothing in {text:?}, found {spans:?}"
    );
}

#[test]
fn emails() {
    assert_finds(
        "EMAIL_ADDRESS",
        "write to jane.doe+ops@example.co.uk today",
        "jane.doe+ops@example.co.uk",
    );
    assert_finds(
        "EMAIL_ADDRESS",
        "<a.b@sub.example.com>",
        "a.b@sub.example.com",
    );
    assert_clean("git@ is not an address, nor is user@localhost or @example.com");
}

#[test]
fn phones() {
    assert_finds(
        "PHONE_NUMBER",
        "call +1 415 555 0132 now",
        "+1 415 555 0132",
    );
    assert_finds("PHONE_NUMBER", "Tel: +44 20 7946 0958", "+44 20 7946 0958");
    assert_finds("PHONE_NUMBER", "+49-30-1234567 (office)", "+49-30-1234567");
    assert_finds(
        "PHONE_NUMBER",
        "reach me at (415) 555-0132",
        "(415) 555-0132",
    );
    assert_finds("PHONE_NUMBER", "mobile 06 12 34 56 78", "06 12 34 56 78");
    // A country code makes it a phone number whatever word or sign is beside it.
    assert_finds(
        "PHONE_NUMBER",
        "ring +44 20 7946 0958 kR",
        "+44 20 7946 0958",
    );
    assert_finds("PHONE_NUMBER", "EUR +46 70 123 45 67", "+46 70 123 45 67");
    assert_finds("PHONE_NUMBER", "+1 415 555 0132 $", "+1 415 555 0132");
    // Dates, versions, order numbers and plain counts are not phones.
    assert_clean("released 2024-01-15, version 10.4.2, order SO-123456, 1,234,567 rows");
    assert_clean("build 20240115 took 1234 ms");
}

#[test]
fn credit_cards() {
    assert_finds(
        "CREDIT_CARD",
        "card 4111 1111 1111 1111 exp 12/29",
        "4111 1111 1111 1111",
    );
    assert_finds("CREDIT_CARD", "5500-0000-0000-0004", "5500-0000-0000-0004");
    assert_finds("CREDIT_CARD", "amex 340000000000009.", "340000000000009");
    assert_finds(
        "CREDIT_CARD",
        "Payment: 3782 822463 10005 exp",
        "3782 822463 10005",
    );
    assert_finds(
        "CREDIT_CARD",
        r#""card":"3782-822463-10005""#,
        "3782-822463-10005",
    );
    // Groups set apart by two spaces or dots; and in other digits.
    for card in [
        "4111  1111  1111  1111",
        "4111.1111.1111.1111",
        "3782  822463  10005",
    ] {
        assert_finds("CREDIT_CARD", &format!("card {card} exp"), card);
    }
    assert_finds(
        "CREDIT_CARD",
        "card ⁴¹¹¹ ①①①① 1111 1111",
        "⁴¹¹¹ ①①①① 1111 1111",
    );
    assert_finds(
        "CREDIT_CARD",
        "card 4\u{20E3}1\u{20E3}1\u{20E3}1\u{20E3}111111111111",
        "4\u{20E3}1\u{20E3}1\u{20E3}1\u{20E3}111111111111",
    );
    assert_clean("versions 4111.1111.1111.1112 and 1.2.3");
    // Tab-separated figures are a table's columns (years here, Luhn-valid by chance).
    assert_clean("Year\t2023\t2024\t2025\t2026");
    // Digits of a UUID that happen to pass Luhn are part of the UUID.
    assert_clean(r#""trace_id":"51714236-0245-4106-9d26-63cce608e14f""#);
    assert_clean("order SO-536-22-1234 shipped");
    // Luhn-invalid runs, too short, and digits inside a longer token.
    assert_clean("ref 4111 1111 1111 1112 and 1234 5678 9012 3456");
    assert_clean("tracking 94001118992234567890123 and id 4111111111111111abc");
}

#[test]
fn ssns() {
    assert_finds("US_SSN", "SSN 536-22-1234 on file", "536-22-1234");
    assert_clean("000-12-3456 666-12-3456 912-12-3456 536-00-1234 078-05-1120");
    assert_clean("phone ext 555-12-34567");
    // After a cue word, dotted or without separators as well.
    assert_finds("US_SSN", "SSN: 536221234", "536221234");
    assert_finds("US_SSN", "ssn 536.22.1234 on file", "536.22.1234");
    assert_clean("order 536221234 shipped, version 536.22.1234");
}

#[test]
fn ibans() {
    assert_finds(
        "IBAN_CODE",
        "pay DE89 3704 0044 0532 0130 00 by Friday",
        "DE89 3704 0044 0532 0130 00",
    );
    assert_finds(
        "IBAN_CODE",
        "GB82WEST12345698765432",
        "GB82WEST12345698765432",
    );
    assert_clean("DE89 3704 0044 0532 0130 01 is a typo");
    for iban in [
        "De89 3704 0044 0532 0130 00",
        "GB82 West 1234 5698 7654 32",
        "DE89-3704-0044-0532-0130-00",
        "DE89.3704.0044.0532.0130.00",
        "ES91 2100 0418 4502 0005 1332",
        "AT61 1904 3002 3457 3201",
        "BE68 5390 0754 7034",
    ] {
        assert_finds("IBAN_CODE", &format!("pay {iban} by Friday"), iban);
        assert_finds("IBAN_CODE", &format!("pay {iban} para el pago"), iban);
    }
}

#[test]
fn ip_addresses() {
    assert_finds("IP_ADDRESS", "from 203.0.113.42 at noon", "203.0.113.42");
    assert_finds(
        "IP_ADDRESS",
        "upstream 10.131.125.35:6379 returned 502",
        "10.131.125.35",
    );
    assert_finds("IP_ADDRESS", "[2001:db8::1]:443", "2001:db8::1");
    assert_finds(
        "IP_ADDRESS",
        "client 2001:db8::8a2e:370:7334 connected",
        "2001:db8::8a2e:370:7334",
    );
    assert_clean("version 1.2.3.4.5, 999.1.1.1, meet at 12:30:45, mac 00:1a:2b:3c:4d:5e:6f:7a:8b");
}

#[test]
fn urls_with_credentials() {
    assert_finds(
        "URL",
        "db postgres://app:hunter2@db.internal:5432/prod?sslmode=require.",
        "postgres://app:hunter2@db.internal:5432/prod?sslmode=require",
    );
    assert_finds(
        "URL",
        r#"{"dsn":"amqp://admin:pw@mq.example.io/vhost"}"#,
        "amqp://admin:pw@mq.example.io/vhost",
    );
    assert_clean("see https://example.com/docs?q=1 and http://localhost:8080/a");
}

#[test]
fn secrets() {
    let cases = [
        "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f",
        "sk-ant-api03-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0fGh",
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
        "glpat-xYz123AbC456dEf789gH",
        "xoxb-123456789012-abcdefghijkl",
        "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
        "AIzaSyD-abcdefghijklmnopqrstuvwxyz12345",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ];
    for secret in cases {
        assert_finds("SECRET", &format!("key={secret} "), secret);
    }
    let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAK\n-----END RSA PRIVATE KEY-----";
    assert_finds("SECRET", &format!("key:\n{pem}\n"), pem);
    assert_finds(
        "SECRET",
        r#"{"api_key": "q8Xz2LmP0vR7tK4wN9bY"}"#,
        "q8Xz2LmP0vR7tK4wN9bY",
    );
    assert_finds("SECRET", "password=Zr7!kq2Lm9xP4vB8", "Zr7!kq2Lm9xP4vB8");
    // UUIDs, git hashes and low-entropy values after keywords are not secrets.
    assert_clean(
        "trace 01a22695-3978-7e64-8c41-cf8e07b43936 commit 9fceb02d0ae598e95dc970b74767f19372d61af8",
    );
    assert_clean("token: aaaaaaaaaaaaaaaaaaaa and password=passwordpassword");
    // A bearer token, and a credential given as a command-line option.
    assert_finds(
        "SECRET",
        "Authorization: Bearer q8Xz2LmP0vR7tK4wN9bY.aB3",
        "q8Xz2LmP0vR7tK4wN9bY.aB3",
    );
    assert_finds(
        "SECRET",
        "mysql -u ops --password Zr7kq2Lm9xP4vB8 -h db1",
        "Zr7kq2Lm9xP4vB8",
    );
    assert_finds(
        "SECRET",
        "deploy -token=q8Xz2LmP0vR7tK4w",
        "q8Xz2LmP0vR7tK4w",
    );
    assert_finds(
        "SECRET",
        "login --client-secret q8Xz2LmP0vR7tK4w --db-password=Zr7kq2Lm9xP4vB8",
        "q8Xz2LmP0vR7tK4w",
    );
    // A keyword with a suffix or a space, as configuration files and prose write it; other
    // assignment signs; a value holding `&` or `;` after a colon; a password said in words;
    // basic credentials; the word for password in other languages.
    for (text, secret) in [
        (
            "SECRET_KEY = 'django-insecure-8f3k$2m9xq7w1z5v'",
            "django-insecure-8f3k$2m9xq7w1z5v",
        ),
        (
            "SECRET_KEY_BASE=9f8e7d6c5b4a39281706f5e4d3c2b1a0",
            "9f8e7d6c5b4a39281706f5e4d3c2b1a0",
        ),
        ("{ secretKey: 'Zx81Qp02Lm93Wn47' }", "Zx81Qp02Lm93Wn47"),
        (
            "AWS secret key: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
        ("API KEY: q8Xz2LmP0vR7tK4w", "q8Xz2LmP0vR7tK4w"),
        ("'password' => 'Xk9mP2vL7qWz4'", "Xk9mP2vL7qWz4"),
        ("DB_PASS=Xk9mP2vL7qWz4", "Xk9mP2vL7qWz4"),
        ("--pass: Xk9mP2vL7qWz4", "Xk9mP2vL7qWz4"),
        ("my password: Tr0ub4dor&3xyzQ", "Tr0ub4dor&3xyzQ"),
        (
            "my password: Summer2024;Secure!x, then",
            "Summer2024;Secure!x",
        ),
        ("my password is Xk9#mP2$vL7qW.", "Xk9#mP2$vL7qW"),
        (
            "Authorization: Basic YWRtaW46U3VwM3JTM2NyM3Q=",
            "YWRtaW46U3VwM3JTM2NyM3Q=",
        ),
        (
            "Authorization: Token q8Xz2LmP0vR7tK4wN9bY",
            "q8Xz2LmP0vR7tK4wN9bY",
        ),
        ("Das Passwort: Xk9mP2vL7qWz4", "Xk9mP2vL7qWz4"),
        ("пароль: Xk9mP2vL7qWz4", "Xk9mP2vL7qWz4"),
        ("ПАРОЛЬ: Xk9mP2vL7qWz4", "Xk9mP2vL7qWz4"),
        ("contrasena: Xk9mP2vL7qWz4", "Xk9mP2vL7qWz4"),
        ("password: $ecureP4ss2024!", "$ecureP4ss2024!"),
        ("PASSWORD := \"Xk9mP2vL7qWz4\"", "Xk9mP2vL7qWz4"),
        ("パスワード：Xk9mP2vL7qWz4", "Xk9mP2vL7qWz4"),
        ("كلمة المرور: Xk9mP2vL7qWz4", "Xk9mP2vL7qWz4"),
        ("סיסמה: Xk9mP2vL7qWz4", "Xk9mP2vL7qWz4"),
        (
            "redis://:S3cr3tRedisPassw0rd@cache.internal:6379",
            "redis://:S3cr3tRedisPassw0rd@cache.internal:6379",
        ),
    ] {
        let entity = if secret.starts_with("redis") {
            "URL"
        } else {
            "SECRET"
        };
        assert_finds(entity, text, secret);
    }
    // Query strings, calls, identifiers and phrases around credential words are no secrets.
    for text in [
        "my password is wrong, and the token_count: 4096 tokens, the secret_value: unknown",
        "Summarise https://example.com/search?auth=1&q=weather&lang=en&units=metric please",
        "GET /api/v1/items?page_token=2&limit=50&sort=created_at 200 1432ms",
        "csrf_token=2&next=/dashboard/settings and oauth_token=x&oauth_verifier=y123&format=json",
        "https://app.example.com/callback?state=xyz&token=abc&redirect=%2Fhome2",
        "resp = client.list(page_token=tok,max_results=25) and f(token=tok,timeout=30)",
        "Parse this: auth=ok;user=42;role=admin;region=eu-west-1",
        "The password was reset_by_admin_2024",
        "password_string=input_field_12 and passwordKey=user_password_v2;hashAlgo=bcrypt",
        "bypass: enabled-for-v2-users and the token -> next_token_id123 mapping",
        "users.map(token => validate2(token)) and pwd was /home/ubuntu/work2024/Project",
        "password: ${DB_PASSWORD_2024} and PWD=/home/ubuntu/workspace/my-app-v2",
        "--- PASS: TestParseConfig2 (0.00s) and PASS: test_utf8_decode_01",
        "auth := base64.StdEncoding.EncodeToString([]byte(user2 + pass))",
        "a basic python3.11-slim image and a basic llama-3.1-8b-instruct model",
        "token: Identifier(variable_name1) and token = tokenizer.decode(output_ids2)",
    ] {
        let words = found(text);
        assert!(
            words.iter().all(|(entity, _)| *entity != "SECRET"),
            "{text}: {words:?}"
        );
    }
    let options = found("the bearer of this letter, and the --password-file option");
    assert!(
        options.iter().all(|(entity, _)| *entity != "SECRET"),
        "{options:?}"
    );
}

#[test]
fn spans_are_byte_offsets_and_never_overlap() {
    let text = "é mail: ü@example.org and jane@example.org";
    let scanner = Scanner::new(None).unwrap();
    let spans = scanner.scan(text);
    assert_eq!(
        spans.iter().map(|s| (s.start, s.end)).collect::<Vec<_>>(),
        [(9, 23), (28, 44)]
    );
    assert_eq!(&text[spans[0].start..spans[0].end], "ü@example.org");
    assert_eq!(&text[spans[1].start..spans[1].end], "jane@example.org");
    let overlapping = "postgres://app:s3cr3tPassw0rd99xyz@db.example.com";
    let spans = scanner.scan(overlapping);
    assert_eq!(spans.len(), 1, "{spans:?}");
    assert_eq!(spans[0].entity, "URL");
}

#[test]
fn entity_filter() {
    let only = Scanner::new(Some(&["EMAIL_ADDRESS".to_owned()])).unwrap();
    let spans = only.scan("a@example.com 4111 1111 1111 1111");
    assert_eq!(
        spans.iter().map(|s| s.entity).collect::<Vec<_>>(),
        ["EMAIL_ADDRESS"]
    );
    assert!(matches!(
        Scanner::new(Some(&["NOPE".to_owned()])),
        Err(Error::UnknownEntity(_))
    ));
    assert!(std::ptr::eq(intern("CODENAME"), intern("CODENAME")));
}

#[test]
fn a_shaped_value_inside_a_name_keeps_its_own_type() {
    // An address shape around an SSN or an IP address: the value is its own type (its own
    // action, its own entity in Cedar's context), and the rest of the address stays masked.
    let cases = [
        (
            "Mailing address: 536-22-1234 Elm Street Apt 5, Denver, CO 80202",
            ("US_SSN", "536-22-1234"),
            "Elm Street Apt 5, Denver, CO 80202",
        ),
        (
            "Visit us at 203.0.113.42 Baker Street, London",
            ("IP_ADDRESS", "203.0.113.42"),
            "Baker Street, London",
        ),
    ];
    let detector = names::names().unwrap();
    for (text, (entity, value), rest) in cases {
        // The name detectors alone take (part of) the value into the address.
        let mut raw = Vec::new();
        names::find(detector, text, &[true; 3], &mut raw);
        let at = text.find(value).unwrap();
        assert!(
            raw.iter()
                .any(|n| n.entity == "LOCATION" && n.start < at + value.len() && at < n.end),
            "{text:?}: {raw:?}"
        );
        let spans = found(text);
        assert!(
            spans.contains(&(entity, value.to_owned())),
            "{text:?}: {spans:?}"
        );
        assert!(
            spans.contains(&("LOCATION", rest.to_owned())),
            "{text:?}: {spans:?}"
        );
    }
}

/// Two values joined by a sign that is part of neither (`4111 1111 1111 1111+jane@example.com`,
/// `https://u:p@host/x=4111 1111 1111 1111`) can be read as a longer value that takes the
/// start of the next one: whichever wins, every letter and digit of each value is covered by
/// some span. (Signs that can be part of a value, `-`, `_`, `.`, `:`, `@`, or none at all,
/// make the reading ambiguous: `docs/security.md`, "glued values".)
#[test]
fn glued_values_are_covered_whole() {
    let scanner = Scanner::new(None).unwrap();
    let values = [
        "jane.doe@example.com",
        "+1 415 555 0132",
        "415-555-0132",
        "4111 1111 1111 1111",
        "4111111111111111",
        "536-22-1234",
        "GB82WEST12345698765432",
        "192.168.10.20",
        "2001:db8::ff00:42:8329",
        "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
        "AKIAABCDEFGHIJKLMNOP",
        "https://bob:hunter22@db.example.com/x",
    ];
    let mut left = Vec::new();
    for a in values {
        for b in values {
            for glue in [" ", ",", ";", "|", "\t", "\n", "/", "=", "+", " - "] {
                let text = format!("x {a}{glue}{b} y");
                let spans = scanner.scan(&text);
                let covered = |i: usize| spans.iter().any(|s| s.start <= i && i < s.end);
                for (value, at) in [(a, 2), (b, 2 + a.len() + glue.len())] {
                    let clear = (at..at + value.len())
                        .filter(|&i| text.as_bytes()[i].is_ascii_alphanumeric() && !covered(i))
                        .count();
                    if clear > 0 && (at..at + value.len()).any(covered) {
                        left.push(format!("{value:?} in {text:?}"));
                    }
                }
            }
        }
    }
    assert!(left.is_empty(), "partly in the clear: {left:#?}");
}

#[test]
fn types_found_by_their_context_are_told_apart() {
    let scanner = Scanner::new(None).unwrap();
    // A phone number may need "mobile", a keyed secret its keyword, a name its sentence.
    for entity in ["PHONE_NUMBER", "SECRET", "PERSON", "US_SSN", "NO_SUCH_TYPE"] {
        assert!(scanner.found_by_context(entity), "{entity}");
    }
    for entity in ["EMAIL_ADDRESS", "CREDIT_CARD", "IBAN_CODE"] {
        assert!(!scanner.found_by_context(entity), "{entity}");
    }
}
