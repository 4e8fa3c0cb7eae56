//! `sqlx::migrate!` embeds the migrations at compile time; stable Rust cannot tell Cargo to
//! watch them from inside the macro, so a changed migration would otherwise not rebuild the crate.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
