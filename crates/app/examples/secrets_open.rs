//! Times what naming five secrets costs a call on the server's side: opening them (cache,
//! two decryptions each) and building their redactor, against a real SQLite store.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::sync::Arc;
use std::time::Instant;

use toolgate_app::Secrets;
use toolgate_domain::{AccountId, ApiKey, Brand, Email, SecretName};
use toolgate_store::{NewAccount, Store};
use toolgate_store_sqlite::{Durability, SqliteStore};
use toolgate_vault::{KeySource, MasterKeys, Vault};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("t.db"), Durability::Normal)
        .await
        .unwrap();
    let store: Arc<dyn Store> = Arc::new(store);
    let key = ApiKey::generate(&Brand::parse("svc").unwrap()).unwrap();
    let id = AccountId::generate();
    store
        .create_account(&NewAccount {
            id: id.clone(),
            email: Email::parse("bench@example.org").unwrap(),
            key_hash: key.hash(),
        })
        .await
        .unwrap();
    let vault =
        Arc::new(Vault::open_source(KeySource::Given(MasterKeys::generate().unwrap())).unwrap());
    let secrets = Secrets::new(store, vault);
    let names: Vec<SecretName> = (0..5)
        .map(|i| SecretName::parse(&format!("SECRET_{i}")).unwrap())
        .collect();
    for name in &names {
        secrets
            .set(&id, name, &format!("{name}-{}", "k".repeat(36)), None)
            .await
            .unwrap();
    }
    for round in 0..3 {
        let n = 20_000;
        let started = Instant::now();
        for _ in 0..n {
            let opened = secrets.open(&id, &names).await.unwrap();
            let redactor = opened.redactor();
            std::hint::black_box(redactor.redact("2"));
        }
        let each = started.elapsed().as_secs_f64() * 1e6 / f64::from(n);
        println!("round {round}: open 5 secrets + redactor: {each:.2} µs per call");
    }
}
