//! How fast redaction runs: 1 MiB of program output with five secrets (each in its nine forms)
//! redacted whole and as a stream of 4 KiB pieces. `cargo run --release -p toolgate-vault
//! --example redact_throughput` prints MB/s (goal: ≥ 200 MB/s).

use std::time::Instant;

use toolgate_domain::SecretName;
use toolgate_vault::Redactor;

fn main() {
    let secrets: Vec<(SecretName, String)> = (1..=5)
        .filter_map(|n| {
            let name = SecretName::parse(&format!("SECRET_{n}")).ok()?;
            Some((name, format!("sk-{n}-{}", "a1b2c3d4".repeat(5))))
        })
        .collect();
    let started = Instant::now();
    for _ in 0..1000 {
        std::hint::black_box(Redactor::new(
            secrets.iter().map(|(n, v)| (n, v.as_bytes())),
        ));
    }
    let build = started.elapsed() / 1000;
    let redactor = Redactor::new(secrets.iter().map(|(n, v)| (n, v.as_bytes())));
    // a call's small texts, most holding no value: the per-call cost that matters
    let small = "stdout line of a typical short result, nothing secret in it\n";
    let started = Instant::now();
    for _ in 0..10_000 {
        let mut text = small.to_owned();
        std::hint::black_box(redactor.redact_in_place(&mut text));
    }
    let scan = started.elapsed() / 10_000;
    // log-like lines, one in a hundred carrying a secret
    let mut output = String::new();
    let mut line = 0usize;
    while output.len() < 1 << 20 {
        line += 1;
        if line.is_multiple_of(100) {
            output.push_str(&format!("token={}\n", secrets[line % 5].1));
        } else {
            output.push_str(&format!(
                "{line:>8} INFO request handled in 0.42 ms status=200 path=/api/items\n"
            ));
        }
    }
    let rounds = 200;
    let started = Instant::now();
    let mut replaced = 0;
    for _ in 0..rounds {
        replaced = redactor.redact(&output).matches("[REDACTED:").count();
    }
    let whole = started.elapsed();
    let started = Instant::now();
    for _ in 0..rounds {
        let mut stream = redactor.stream();
        let mut shown = 0usize;
        for piece in output.as_bytes().chunks(4096) {
            shown += stream
                .push(std::str::from_utf8(piece).unwrap_or_default())
                .len();
        }
        shown += stream.finish().len();
        std::hint::black_box(shown);
    }
    let streamed = started.elapsed();
    let mb = (output.len() * rounds) as f64 / 1e6;
    println!("building the redactor for five secrets: {build:?}; checking a short text: {scan:?}");
    println!(
        "redaction of {} bytes ({replaced} values replaced, five secrets in nine forms each): whole {:.0} MB/s, \
         as 4 KiB stream pieces {:.0} MB/s",
        output.len(),
        mb / whole.as_secs_f64(),
        mb / streamed.as_secs_f64()
    );
}
