//! Tailor's fleet pages: what is over- or under-requested, what it costs a month, what needs a look, and
//! per workload the usage the model holds against today's requests and the recommendation. Pure: the
//! recommender serves the pages from the [`model::Fleet`] it builds after each loop (docs/dashboard.md);
//! `tailor report` renders the same pages into one offline file from a trace.
//!
//! - [`model`]: the fleet as the pages show it (also the JSON twin's format).
//! - [`money`]: prices and monthly costs.
//! - [`summary`]: totals per namespace and for the fleet.
//! - [`query`]: a fleet page's filters, sort and page, read within bounds.
//! - [`mod@html`]: the pages.

pub mod html;
pub mod model;
pub mod money;
pub mod query;
pub mod summary;

use maud::{Markup, html};

use html::Links;
use model::Fleet;
use query::FleetQuery;
use summary::Summary;

/// Most updater actions kept per workload.
pub const MAX_ACTIONS: usize = 10;

/// Most buckets kept of one usage histogram.
pub const MAX_BUCKETS: usize = 200;

/// The fleet page, served.
pub fn fleet_page(fleet: &Fleet, query: &FleetQuery) -> String {
    fleet_page_with(fleet, &Summary::of(&fleet.workloads, &fleet.prices), query)
}

/// The fleet page with the fleet's totals already summed (a server sums them once per fleet, not per view).
pub fn fleet_page_with(fleet: &Fleet, summary: &Summary, query: &FleetQuery) -> String {
    let body = html::fleet::body(fleet, summary, query, Links::Server);
    html::document("Fleet", fleet, body).into_string()
}

/// A workload's page, served; `None` when the fleet has no such VPA.
pub fn workload_page(fleet: &Fleet, namespace: &str, vpa: &str) -> Option<String> {
    let w = fleet.workload(namespace, vpa)?;
    let title = format!("{namespace}/{vpa}");
    Some(
        html::document(
            &title,
            fleet,
            html::workload::section(w, fleet, Links::Server),
        )
        .into_string(),
    )
}

/// The page a server shows when it has no fleet to show, saying why (`why` is escaped).
pub fn unavailable_page(why: &str) -> String {
    let page = html! {
        (maud::DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { "Tailor" } }
            body { h1 { "Tailor" } p #unavailable { (why) } }
        }
    };
    page.into_string()
}

/// The whole fleet as one self-contained document: the fleet page (every workload, unpaged) and every
/// workload's section.
pub fn report(fleet: &Fleet) -> String {
    let all = FleetQuery::default();
    let summary = Summary::of(&fleet.workloads, &fleet.prices);
    let body: Markup = html! {
        section #fleet { (html::fleet::body(fleet, &summary, &all, Links::Report)) }
        @for w in &fleet.workloads { (html::workload::section(w, fleet, Links::Report)) }
    };
    html::document("Tailor report", fleet, body).into_string()
}
