//! `search` (+ `max_results`, `freshness`) on `svc_ai`: live web results with their sources;
//! with `prompt` and `model`, the model answers from the results and cites them, its `[n]`
//! marks turned into links and listed in `citations`. A caller's vault key for Brave, Tavily
//! or Exa chooses that engine; else the operator's.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolgate_domain::SecretName;
use toolgate_vault::Zeroizing;

use super::ModelCall;
use crate::capability::{
    CallContext, Capability, ContentItem, Failure, Field, JsonObject, Output, ToolKind, TypedOutput,
};
use crate::schema::FieldKind;
use crate::secrets::Secrets;
use toolgate_ports::ai::{Freshness, SearchAnswer, SearchQuery, SearchResult, Searches};

/// Longest query, in bytes.
const MAX_QUERY_BYTES: usize = 2048;
/// Results by default, and at most.
const DEFAULT_RESULTS: u64 = 5;
const MAX_RESULTS: i64 = 20;

/// The search.
pub struct SearchCall {
    searches: Arc<dyn Searches>,
    secrets: Option<Arc<Secrets>>,
    /// the model call, for `search` with `prompt`
    llm: Option<Arc<ModelCall>>,
}

impl SearchCall {
    /// Searches through `searches`, answering with `llm` when a prompt comes along.
    pub fn new(
        searches: Arc<dyn Searches>,
        secrets: Option<Arc<Secrets>>,
        llm: Option<Arc<ModelCall>>,
    ) -> Self {
        Self {
            searches,
            secrets,
            llm,
        }
    }

    /// The first engine the caller's vault has a key for (the key registered with the call,
    /// which redacts it).
    async fn engine(&self, ctx: &CallContext<'_>) -> Option<(String, Zeroizing<String>)> {
        let secrets = self.secrets.as_ref()?;
        for (engine, secret) in self.searches.key_secrets() {
            let Ok(name) = SecretName::parse(&secret) else {
                continue;
            };
            if let Ok(opened) = secrets
                .open(&ctx.account.id, std::slice::from_ref(&name))
                .await
            {
                ctx.secrets
                    .add(opened.iter().map(|(n, v)| (n, v.as_bytes())));
                if let Some((_, key)) = opened.iter().next() {
                    return Some((engine, Zeroizing::new(key.to_owned())));
                }
            }
        }
        None
    }
}

#[async_trait]
impl Capability for SearchCall {
    fn key(&self) -> &'static str {
        "search"
    }

    fn tool(&self) -> ToolKind {
        ToolKind::Ai
    }

    fn summary(&self) -> &'static str {
        "`search` (+ `max_results` 1-20, default 5; `freshness`: day, week, month or year) \
         searches the live web: each result's title, URL, snippet and date, as text and in \
         structuredContent. With `prompt` and `model` too, the model answers from the results \
         and cites them ([n] marks become links; `citations` lists them). Your key in the vault \
         as BRAVE_API_KEY, TAVILY_API_KEY or EXA_API_KEY chooses that engine; else the \
         operator's."
    }

    fn fields(&self) -> Vec<Field> {
        vec![
            Field {
                name: "search",
                kind: FieldKind::String {
                    max_len: MAX_QUERY_BYTES,
                },
                description: "what to search the web for",
            },
            Field {
                name: "max_results",
                kind: FieldKind::Integer {
                    min: 1,
                    max: MAX_RESULTS,
                },
                description: "results wanted (default 5)",
            },
            Field {
                name: "freshness",
                kind: FieldKind::String { max_len: 8 },
                description: "only results of the last day, week, month or year",
            },
        ]
    }

    fn output_schema(&self) -> Value {
        let text = json!({"type": "string"});
        json!({"type": "object", "properties": {
            "engine": text, "query": text,
            "results": {"type": "array", "items": {"type": "object", "properties": {
                "title": text, "url": text, "snippet": text, "date": {"type": ["string", "null"]}},
                "required": ["title", "url", "snippet", "date"]}},
            "answer": text,
            "citations": {"type": "array", "items": {"type": "object", "properties": {
                "n": {"type": "integer"}, "title": text, "url": text}}},
            "llm": {"type": "object"}},
            "required": ["engine", "query", "results"]})
    }

    fn overlaps_commit(&self) -> bool {
        true
    }

    /// The live web, through a search provider.
    fn reaches_outside(&self) -> bool {
        true
    }

    fn wants(&self, args: &JsonObject) -> bool {
        args.contains_key("search")
    }

    /// One turn for the search and the model call that may answer from it.
    fn turn_kind(&self, _args: &JsonObject) -> Option<crate::turns::TurnKind> {
        Some(crate::turns::TurnKind::Models)
    }

    fn validate(&self, args: &JsonObject) -> Result<(), String> {
        if let Some(word) = args.get("freshness").and_then(Value::as_str)
            && Freshness::parse(word).is_none()
        {
            return Err(format!("`freshness` must be one of {:?}", Freshness::WORDS));
        }
        if args.contains_key("messages") {
            return Err("`search` takes `prompt`, not `messages`".to_owned());
        }
        match (&self.llm, args.contains_key("prompt")) {
            (None, true) => {
                Err("this service calls no models, so `search` cannot take `prompt`".to_owned())
            }
            (Some(llm), true) => llm.validate(args),
            _ => Ok(()),
        }
    }

    async fn run(&self, ctx: &CallContext<'_>, args: &JsonObject) -> Result<Output, Failure> {
        let query = args
            .get("search")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let engine = self.engine(ctx).await;
        let found = self
            .searches
            .search(SearchQuery {
                query: query.clone(),
                max_results: args
                    .get("max_results")
                    .and_then(Value::as_u64)
                    .unwrap_or(DEFAULT_RESULTS) as u32,
                freshness: args
                    .get("freshness")
                    .and_then(Value::as_str)
                    .and_then(Freshness::parse),
                engine,
            })
            .await
            .map_err(|e| Failure::new(e.to_string()))?;
        let mut output = listed(&query, &found);
        if let (Some(llm), Some(prompt)) = (&self.llm, args.get("prompt").and_then(Value::as_str)) {
            answered(llm, ctx, args, prompt, &found, &mut output).await?;
        }
        Ok(output)
    }
}

/// The results as a numbered list, as structured results and as they are (the typed result).
fn listed(query: &str, found: &SearchAnswer) -> Output {
    let mut text = String::new();
    for (i, r) in found.results.iter().enumerate() {
        text.push_str(&format!("{}. {}\n   {}\n", i + 1, r.title, r.url));
        if !r.snippet.is_empty() {
            text.push_str(&format!("   {}\n", r.snippet));
        }
        if let Some(date) = &r.date {
            text.push_str(&format!("   ({date})\n"));
        }
    }
    if found.results.is_empty() {
        text.push_str("No results.");
    }
    let results: Vec<Value> = found
        .results
        .iter()
        .map(|r| json!({"title": r.title, "url": r.url, "snippet": r.snippet, "date": r.date}))
        .collect();
    Output {
        content: vec![ContentItem::Text(text.trim_end().to_owned())],
        structured: json!({"engine": found.engine, "query": query, "results": results}),
        typed: Some(TypedOutput::Search(found.results.clone())),
        ..Output::default()
    }
}

/// Asks the model to answer `prompt` from the results; the answer leads the content, its
/// citations resolved.
async fn answered(
    llm: &ModelCall,
    ctx: &CallContext<'_>,
    args: &JsonObject,
    prompt: &str,
    found: &SearchAnswer,
    output: &mut Output,
) -> Result<(), Failure> {
    let mut sources = String::new();
    for (i, r) in found.results.iter().enumerate() {
        sources.push_str(&format!(
            "[{}] {} ({})\n{}\n\n",
            i + 1,
            r.title,
            r.url,
            r.snippet
        ));
    }
    let mut system = String::from(
        "Answer the question from the search results below. Cite the results you use as [n], \
         n being the result's number. If they do not answer it, say so.",
    );
    if let Some(own) = args.get("system").and_then(Value::as_str) {
        system = format!("{own}\n\n{system}");
    }
    let mut asked = args.clone();
    asked.remove("search");
    asked.insert("system".into(), json!(system));
    asked.insert(
        "prompt".into(),
        json!(format!("Search results:\n\n{sources}Question: {prompt}")),
    );
    let model = llm.run(ctx, &asked).await?;
    let answer = model
        .content
        .iter()
        .find_map(|c| match c {
            ContentItem::Text(t) => Some(t.clone()),
            ContentItem::Image { .. } | ContentItem::ResourceLink(_) => None,
        })
        .unwrap_or_default();
    let (linked, citations) = cite(&answer, &found.results);
    output.content.insert(0, ContentItem::Text(linked.clone()));
    output.structured["answer"] = json!(linked);
    output.structured["citations"] = json!(citations);
    output.structured["llm"] = model.structured;
    Ok(())
}

/// `[n]` marks of known results made links, and the results cited, in the order first cited.
fn cite(answer: &str, results: &[SearchResult]) -> (String, Vec<Value>) {
    let mut linked = answer.to_owned();
    let mut cited: Vec<(usize, usize)> = Vec::new();
    for (i, r) in results.iter().enumerate() {
        let mark = format!("[{}]", i + 1);
        if let Some(at) = answer.find(&mark) {
            cited.push((at, i));
            linked = linked.replace(&mark, &format!("[{}]({})", i + 1, r.url));
        }
    }
    cited.sort();
    let citations = cited
        .into_iter()
        .map(|(_, i)| json!({"n": i + 1, "title": results[i].title, "url": results[i].url}))
        .collect();
    (linked, citations)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_become_links_and_citations_in_the_order_cited() {
        let r = |n: u8| SearchResult {
            title: format!("T{n}"),
            url: format!("https://e.org/{n}"),
            snippet: String::new(),
            date: None,
        };
        let (text, citations) = cite(
            "B says so [2], and A agrees [1]. [9] is not a result; [2] again.",
            &[r(1), r(2)],
        );
        assert_eq!(
            text,
            "B says so [2](https://e.org/2), and A agrees [1](https://e.org/1). [9] is not a result; [2](https://e.org/2) again."
        );
        assert_eq!(
            citations,
            vec![
                json!({"n": 2, "title": "T2", "url": "https://e.org/2"}),
                json!({"n": 1, "title": "T1", "url": "https://e.org/1"})
            ]
        );
    }
}
