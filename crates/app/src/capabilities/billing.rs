//! `billing` on the read tool: the billing status record, including the call that asks for it.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolgate_domain::BillingStatus;

use crate::capability::{
    CallContext, Capability, ContentItem, Failure, Field, JsonObject, Output, ToolKind, TypedOutput,
};
use crate::metering::Meter;
use crate::schema::FieldKind;

/// Reports the caller's allowance, wallet and prices.
pub struct Billing {
    meter: Arc<Meter>,
}

impl Billing {
    /// Reads through `meter`.
    pub fn new(meter: Arc<Meter>) -> Self {
        Self { meter }
    }
}

#[async_trait]
impl Capability for Billing {
    fn key(&self) -> &'static str {
        "billing"
    }

    fn tool(&self) -> ToolKind {
        ToolKind::Read
    }

    fn summary(&self) -> &'static str {
        "set `billing: true` to get your billing status: free calls left this month, the monthly \
         allowance, the wallet balance in USD, how many paid calls it covers, and the prices. The \
         figures already include this call."
    }

    fn fields(&self) -> Vec<Field> {
        vec![Field {
            name: "billing",
            kind: FieldKind::Boolean,
            description: "true: return the billing status record",
        }]
    }

    fn output_schema(&self) -> Value {
        let int = json!({"type": "integer"});
        let text = json!({"type": "string"});
        json!({
            "type": "object",
            "properties": {
                "tier": text, "free_remaining_this_month": int, "free_monthly_limit": int,
                "wallet_balance_usd": text, "paid_calls_available": int, "paid_call_cost_usd": text,
                "min_topup_usd": text, "max_topup_usd": text,
            },
            "required": ["tier", "free_remaining_this_month", "free_monthly_limit", "wallet_balance_usd",
                         "paid_calls_available", "paid_call_cost_usd", "min_topup_usd", "max_topup_usd"],
        })
    }

    fn wants(&self, args: &JsonObject) -> bool {
        args.get("billing").and_then(Value::as_bool) == Some(true)
    }

    async fn run(&self, ctx: &CallContext<'_>, _args: &JsonObject) -> Result<Output, Failure> {
        let status = self
            .meter
            .status(ctx.account, ctx.usage_after)
            .await
            .map_err(|_| {
                Failure::new("the billing status is temporarily unavailable; please retry")
            })?;
        rendered(status)
    }
}

/// The record as the tool shows it: its JSON as the text and as the structured content.
fn rendered(status: BillingStatus) -> Result<Output, Failure> {
    let structured = serde_json::to_value(&status).map_err(|err| Failure::new(err.to_string()))?;
    Ok(Output {
        content: vec![ContentItem::Text(structured.to_string())],
        structured,
        typed: Some(TypedOutput::Billing(status)),
        ..Output::default()
    })
}
