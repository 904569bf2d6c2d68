//! The dashboard's HTTP side, on its own port: the pages and their JSON twins, GET and HEAD only (any other
//! method gets 405), with a content security policy that allows no script and no request elsewhere.
//!
//! | Path | What |
//! |---|---|
//! | `/` | the fleet page (`?ns=`, `?q=`, `?flag=`, `?sort=`, `?page=`) |
//! | `/workloads/{namespace}/{vpa}` | a workload's page |
//! | `/api/v1/fleet` | the fleet page's numbers: totals, namespaces, the page of workloads (without their histograms) |
//! | `/api/v1/workloads/{namespace}/{vpa}` | a workload's numbers |
//!
//! Only the leader holds the model: a standby replica answers 503 and says so, and names the leader.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use tailor_dashboard::model::Workload;
use tailor_dashboard::query::{FleetQuery, MAX_VALUE, PAGE_SIZE};
use tailor_dashboard::summary::Summary;

use super::cache::Answer;
use super::{DashboardState, Published};

/// What every page may load: its own inline styles and nothing else.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; \
                   base-uri 'none'; frame-ancestors 'none'";

fn with_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn html(status: StatusCode, body: String) -> Response {
    let ct = [(header::CONTENT_TYPE, "text/html; charset=utf-8")];
    with_headers((status, ct, body).into_response())
}

fn json<T: Serialize>(status: StatusCode, body: &T) -> Response {
    match serde_json::to_string(body) {
        Ok(text) => {
            let ct = [(header::CONTENT_TYPE, "application/json")];
            with_headers((status, ct, text).into_response())
        }
        Err(e) => html(StatusCode::INTERNAL_SERVER_ERROR, format!("encoding: {e}")),
    }
}

/// Why there is nothing to show.
#[derive(Serialize)]
struct Unavailable {
    error: String,
}

/// The fleet, or the answer that says why there is none (a standby, or no loop yet).
fn fleet_or(state: &DashboardState, as_json: bool) -> Result<Arc<Published>, Box<Response>> {
    match state.fleet() {
        Some(f) => Ok(f),
        None => {
            let why = state.unavailable_reason();
            Err(Box::new(if as_json {
                json(StatusCode::SERVICE_UNAVAILABLE, &Unavailable { error: why })
            } else {
                let page = tailor_dashboard::unavailable_page(&why);
                html(StatusCode::SERVICE_UNAVAILABLE, page)
            }))
        }
    }
}

fn query_of(raw: &HashMap<String, String>) -> FleetQuery {
    FleetQuery::parse(raw.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

const HTML: &str = "text/html; charset=utf-8";
const JSON: &str = "application/json";

/// The answer to `key` from `published`'s cache, or the one `render` makes (kept for the next view); a
/// `render` error is a 500 and not kept.
fn cached(
    published: &Published,
    key: String,
    render: impl FnOnce() -> Result<Answer, String>,
) -> Response {
    let answer = match published.cache.get(&key) {
        Some(a) => a,
        None => match render() {
            Ok(a) => {
                published.cache.put(key, a.clone());
                a
            }
            Err(e) => return html(StatusCode::INTERNAL_SERVER_ERROR, e),
        },
    };
    let ct = [(header::CONTENT_TYPE, answer.content_type)];
    with_headers((StatusCode::OK, ct, answer.body).into_response())
}

/// `body` as a JSON answer, or why it cannot be encoded.
fn encoded<T: Serialize>(body: &T) -> Result<Answer, String> {
    match serde_json::to_vec(body) {
        Ok(text) => Ok(Answer {
            content_type: JSON,
            body: text.into(),
        }),
        Err(e) => Err(format!("encoding: {e}")),
    }
}

async fn fleet_page(
    State(s): State<Arc<DashboardState>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    match fleet_or(&s, false) {
        Ok(p) => {
            let query = query_of(&q);
            cached(&p, format!("page {query:?}"), || {
                Ok(Answer {
                    content_type: HTML,
                    body: tailor_dashboard::fleet_page_with(&p.fleet, &p.summary, &query).into(),
                })
            })
        }
        Err(r) => *r,
    }
}

fn bounded(segment: &str) -> bool {
    segment.len() <= MAX_VALUE
}

async fn workload_page(
    State(s): State<Arc<DashboardState>>,
    Path((ns, vpa)): Path<(String, String)>,
) -> Response {
    let p = match fleet_or(&s, false) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let known = bounded(&ns) && bounded(&vpa) && p.fleet.workload(&ns, &vpa).is_some();
    match known {
        true => cached(&p, format!("workload {ns}/{vpa}"), || {
            Ok(Answer {
                content_type: HTML,
                body: (tailor_dashboard::workload_page(&p.fleet, &ns, &vpa))
                    .unwrap_or_default()
                    .into(),
            })
        }),
        false => html(
            StatusCode::NOT_FOUND,
            "no such VPA among those this recommender handles".into(),
        ),
    }
}

/// The fleet page's numbers.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FleetAnswer<'a> {
    source: &'a tailor_dashboard::model::Source,
    prices: &'a tailor_dashboard::money::Prices,
    summary: &'a Summary,
    query: FleetQuery,
    matched: usize,
    page_size: usize,
    workloads: Vec<serde_json::Value>,
}

/// A workload as the fleet's twin lists it: everything but the usage histograms, which the fleet page does
/// not show (the workload's own twin has them). A page of rows with two containers' histograms each runs
/// past a megabyte; without them it stays small enough to be kept for the loop.
fn fleet_row(w: &Workload) -> Result<serde_json::Value, serde_json::Error> {
    let mut row = serde_json::to_value(w)?;
    for c in (row.get_mut("containers").and_then(|c| c.as_array_mut()))
        .into_iter()
        .flatten()
    {
        if let Some(c) = c.as_object_mut() {
            c.remove("cpuUsage");
            c.remove("memoryUsage");
        }
    }
    Ok(row)
}

async fn fleet_json(
    State(s): State<Arc<DashboardState>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let p = match fleet_or(&s, true) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let query = query_of(&q);
    let f = &p.fleet;
    let render = || {
        let (workloads, matched) = query.select(&f.workloads, &f.prices, PAGE_SIZE);
        let workloads = (workloads.into_iter())
            .map(fleet_row)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("encoding: {e}"))?;
        let answer = FleetAnswer {
            source: &f.source,
            prices: &f.prices,
            summary: &p.summary,
            query: query.clone(),
            matched,
            page_size: PAGE_SIZE,
            workloads,
        };
        encoded(&answer)
    };
    cached(&p, format!("fleet {query:?}"), render)
}

async fn workload_json(
    State(s): State<Arc<DashboardState>>,
    Path((ns, vpa)): Path<(String, String)>,
) -> Response {
    let p = match fleet_or(&s, true) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let found = (bounded(&ns) && bounded(&vpa))
        .then(|| p.fleet.workload(&ns, &vpa))
        .flatten();
    match found {
        Some(w) => cached(&p, format!("workload.json {ns}/{vpa}"), || encoded(w)),
        None => json(
            StatusCode::NOT_FOUND,
            &Unavailable {
                error: "no such VPA".into(),
            },
        ),
    }
}

/// The dashboard's routes.
pub fn router(state: Arc<DashboardState>) -> Router {
    Router::new()
        .route("/", get(fleet_page))
        .route("/workloads/{namespace}/{vpa}", get(workload_page))
        .route("/api/v1/fleet", get(fleet_json))
        .route("/api/v1/workloads/{namespace}/{vpa}", get(workload_json))
        .with_state(state)
}
