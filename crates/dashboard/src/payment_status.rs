//! The one map from a wallet's failure to the HTTP status the dashboard answers, for the top-up
//! form and the provider's callback alike: what the caller sent is 400, the provider failing is
//! 502, payments not set up or storage failing is 503. A callback answered 4xx or 5xx is
//! retried and shown by the provider.

use axum::http::StatusCode;
use toolgate_app::owner::TopUpError;
use toolgate_ports::payments::PaymentError;

/// The status answering `err`.
pub fn status_of(err: &TopUpError) -> StatusCode {
    match err {
        TopUpError::BadAmount(_)
        | TopUpError::UnknownAccount
        | TopUpError::Payment(PaymentError::BadSignature(_) | PaymentError::BadEvent(_)) => {
            StatusCode::BAD_REQUEST
        }
        TopUpError::Payment(PaymentError::Unavailable(_)) => StatusCode::BAD_GATEWAY,
        TopUpError::Payment(PaymentError::NotConfigured) | TopUpError::Unavailable(_) => {
            StatusCode::SERVICE_UNAVAILABLE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_has_its_status() {
        let cases = [
            (TopUpError::BadAmount("x".to_owned()), 400),
            (TopUpError::UnknownAccount, 400),
            (PaymentError::BadSignature("x").into(), 400),
            (PaymentError::BadEvent("x".to_owned()).into(), 400),
            (PaymentError::Unavailable("x".to_owned()).into(), 502),
            (PaymentError::NotConfigured.into(), 503),
            (TopUpError::Unavailable("x".to_owned()), 503),
        ];
        for (err, status) in cases {
            assert_eq!(status_of(&err).as_u16(), status, "{err:?}");
        }
    }
}
