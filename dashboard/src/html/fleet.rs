//! The fleet page: the totals, what needs a look, a row per namespace, and the workloads — filtered,
//! sorted and paged by the query ([`FleetQuery`]), at most [`PAGE_SIZE`] rows, so the page stays small at
//! any fleet size.

use maud::{Markup, html};

use super::{Links, both, cpu, memory, money};
use crate::model::{Flag, Fleet, Workload};
use crate::query::{FleetQuery, PAGE_SIZE, Sort};
use crate::summary::{Summary, Totals};

/// The fleet page's body.
pub fn body(fleet: &Fleet, summary: &Summary, query: &FleetQuery, links: Links) -> Markup {
    // A report holds every workload; a served page one page of them.
    let size = if links == Links::Report {
        usize::MAX
    } else {
        PAGE_SIZE
    };
    let (page, matched) = query.select(&fleet.workloads, &fleet.prices, size);
    let currency = fleet.prices.currency.as_str();
    html! {
        section #totals {
            (totals_table(&summary.fleet, currency))
        }
        h2 { "Needs a look" }
        p #attention {
            @for f in Flag::ALL {
                @let n = summary.fleet.count(f);
                span.(if n > 0 { "warn" } else { "muted" }) data-flag=(format!("{f:?}")) data-count=(n) {
                    @if links == Links::Server {
                        a href=(links.fleet(&[("flag", format!("{f:?}"))])) { (f.label()) ": " (n) }
                    } @else { (f.label()) ": " (n) }
                }
                " "
            }
        }
        h2 { "Namespaces" }
        table #namespaces {
            tr { th.l { "Namespace" } th { "Workloads" } th { "Pods" } th { "Requested" } th { "Recommended" }
                 th { "Requested / month" } th { "Recommended / month" } th { "Saving / month" } th { "OOM" } }
            @for (ns, t) in &summary.namespaces {
                tr data-namespace=(ns) {
                    td.l { @if links == Links::Server { a href=(links.fleet(&[("ns", ns.clone())])) { (ns) } } @else { (ns) } }
                    td { (t.workloads) } td { (t.pods) } td { (both(t.requested)) } td { (both(t.recommended)) }
                    td { (money(t.requested_monthly, currency)) } td { (money(t.recommended_monthly, currency)) }
                    td { (money(t.saving_monthly(), currency)) } td { (t.count(Flag::Oom)) }
                }
            }
        }
        h2 { "Workloads" }
        @if links == Links::Server { (filter_form(query)) }
        p.muted #matched data-matched=(matched) {
            (matched) " workloads match; page " (query.page + 1) " of " (matched.div_ceil(PAGE_SIZE).max(1)) "."
        }
        (workload_table(&page, fleet, query, links))
        @if links == Links::Server { (pager(query, matched, links)) }
    }
}

fn totals_table(t: &Totals, currency: &str) -> Markup {
    html! {
        table {
            tr { th.l { "" } th { "CPU" } th { "Memory" } th { "Per month" } }
            tr { td.l { "Requested now" } td #requested-cpu { (cpu(t.requested.cpu_millicores())) }
                 td #requested-memory { (memory(t.requested.memory_bytes())) } td #requested-monthly { (money(t.requested_monthly, currency)) } }
            tr { td.l { "At the targets" } td #recommended-cpu { (cpu(t.recommended.cpu_millicores())) }
                 td #recommended-memory { (memory(t.recommended.memory_bytes())) } td #recommended-monthly { (money(t.recommended_monthly, currency)) } }
            tr { td.l { "Difference" } td { "" } td { "" } td #saving-monthly.(if t.saving_monthly() < 0.0 { "warn" } else { "ok" }) { (money(t.saving_monthly(), currency)) } }
        }
        p.muted { (t.workloads) " workloads, " (t.pods) " running pods." }
    }
}

fn filter_form(q: &FleetQuery) -> Markup {
    html! {
        form method="get" action="/" {
            label { "Namespace " input name="ns" value=(q.namespace.clone().unwrap_or_default()) maxlength="253"; }
            " "
            label { "Name contains " input name="q" value=(q.search.clone().unwrap_or_default()) maxlength="253"; }
            " "
            label { "Sort by " select name="sort" {
                @for (s, v) in Sort::ALL { option value=(v) selected[s == q.sort] { (v) } }
            } }
            " " button type="submit" { "Show" }
        }
    }
}

fn workload_table(page: &[&Workload], fleet: &Fleet, query: &FleetQuery, links: Links) -> Markup {
    let currency = fleet.prices.currency.as_str();
    let sort_link = |s: Sort| {
        let mut q = query.clone();
        q.sort = s;
        links.fleet(&q.with_page(0))
    };
    html! {
        table #workloads {
            tr {
                th.l { @if links == Links::Server { a href=(sort_link(Sort::Name)) { "Workload" } } @else { "Workload" } }
                th.l { "Kind" } th.l { "Mode" } th.l { "Profile" } th { "Pods" }
                th { @if links == Links::Server { a href=(sort_link(Sort::Cpu)) { "CPU requested" } } @else { "CPU requested" } }
                th { "CPU target" }
                th { @if links == Links::Server { a href=(sort_link(Sort::Memory)) { "Memory requested" } } @else { "Memory requested" } }
                th { "Memory target" }
                th { @if links == Links::Server { a href=(sort_link(Sort::Saving)) { "Saving / month" } } @else { "Saving / month" } }
                th.l { "Needs a look" }
            }
            @for w in page {
                @let req = w.requested();
                @let rec = w.recommended();
                tr.workload data-namespace=(w.namespace) data-vpa=(w.vpa) {
                    td.l { a href=(links.workload(&w.namespace, &w.vpa)) { (w.namespace) "/" (w.vpa) } }
                    td.l { (w.kind) " " (w.name) } td.l { (w.mode) } td.l { (w.profile.as_deref().unwrap_or("–")) }
                    td.pods data-pods=(w.pods) { (w.pods) }
                    td.cpu-requested data-millicores=(req.cpu_millicores().unwrap_or(0)) { (cpu(req.cpu_millicores())) }
                    td.cpu-target data-millicores=(rec.cpu_millicores().unwrap_or(0)) { (cpu(rec.cpu_millicores())) }
                    td.memory-requested data-bytes=(req.memory_bytes().unwrap_or(0)) { (memory(req.memory_bytes())) }
                    td.memory-target data-bytes=(rec.memory_bytes().unwrap_or(0)) { (memory(rec.memory_bytes())) }
                    td.saving data-family=(w.instance_family.as_deref().unwrap_or("")) { (money(w.saving_monthly(&fleet.prices), currency)) }
                    td.l { @for f in &w.flags { span.flag data-flag=(format!("{f:?}")) { (f.label()) } } }
                }
            }
        }
    }
}

fn pager(query: &FleetQuery, matched: usize, links: Links) -> Markup {
    let pages = matched.div_ceil(PAGE_SIZE).max(1);
    html! {
        nav #pager {
            @if query.page > 0 { a rel="prev" href=(links.fleet(&query.with_page(query.page - 1))) { "← previous" } }
            @if query.page + 1 < pages { a rel="next" href=(links.fleet(&query.with_page(query.page + 1))) { "next →" } }
        }
    }
}
