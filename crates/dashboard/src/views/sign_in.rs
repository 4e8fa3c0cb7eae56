//! The sign-in form, "check your inbox", and the link's confirmation page.

use maud::{Markup, html};

use super::bare;

/// The form asking for an address; `error` explains a refused attempt.
pub fn form(error: Option<&str>) -> Markup {
    form_with(error, None)
}

/// The form with an error or a notice above it.
pub fn form_with(error: Option<&str>, notice: Option<&str>) -> Markup {
    form_full(error, notice, None)
}

/// The form, carrying where to go after signing in.
pub fn form_full(error: Option<&str>, notice: Option<&str>, next: Option<&str>) -> Markup {
    bare(
        "Sign in",
        html! {
            (super::alerts(notice, error))
            p { "Enter your e-mail address. We send you a link that signs you in; the first \
                 sign-in creates your account. No password." }
            form #sign-in method="post" action="/magic-link" {
                @if let Some(next) = next { input type="hidden" name="next" value=(next); }
                label for="email" { "E-mail address" }
                input #email type="email" name="email" required autocomplete="email"
                    autofocus maxlength="254" inputmode="email";
                p { button type="submit" { "Send sign-in link" } }
            }
        },
    )
}

/// After a form request: the same words whether or not the address has an account.
pub fn sent(message: &str) -> Markup {
    bare(
        "Check your inbox",
        html! {
            p #notice .notice role="status" { (message) }
            p.muted { "The link works once. Nothing arrived? Check the spam folder, or "
                      a href="/dashboard/sign-in" { "ask again" } "." }
        },
    )
}

/// The page a link opens: one button, so a mail scanner's visit signs nobody in.
pub fn confirm(token: &str, email: &str, next: Option<&str>) -> Markup {
    bare(
        "Sign in",
        html! {
            p { "Sign in to the dashboard as " strong { (email) } "?" }
            form #confirm method="post" action="/dashboard/sign-in/confirm" {
                input type="hidden" name="token" value=(token);
                @if let Some(next) = next { input type="hidden" name="next" value=(next); }
                button type="submit" autofocus { "Sign in" }
            }
            p.muted { "Not you? Close this page: nothing happens without the button." }
        },
    )
}
