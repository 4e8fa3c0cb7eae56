//! Times what redaction adds to a small answer: a redactor for five secrets built, and a dozen
//! short strings checked (the shape of a `1+1` result naming five secrets).
use std::time::Instant;

use toolgate_domain::SecretName;
use toolgate_vault::Redactor;

fn main() {
    let names: Vec<SecretName> = (0..5)
        .map(|i| SecretName::parse(&format!("SECRET_{i}")).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let values: Vec<String> = (0..5)
        .map(|i| format!("SECRET_{i}-{}", "k".repeat(36)))
        .collect();
    let texts = [
        "2",
        "",
        "",
        "2",
        "(no output)",
        "warm",
        "python",
        "",
        "",
        "2",
        "",
        "x",
    ];
    let rounds = 20_000;
    let started = Instant::now();
    let mut hits = 0;
    for _ in 0..rounds {
        let redactor = Redactor::new(names.iter().zip(values.iter().map(|v| v.as_bytes())));
        for text in texts {
            let mut owned = text.to_owned();
            hits += usize::from(redactor.redact_in_place(&mut owned));
        }
    }
    let each = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
    println!(
        "build + {} short strings: {each:.2} µs per call ({hits} hits)",
        texts.len()
    );
}
