//! A workload's page: per container what the pods request and what the VPA recommends, the usage the model
//! holds with the request and the target drawn on it, the status's conditions, the updater's last actions,
//! the explanation, and the kubectl command that shows the same object.

use maud::{Markup, html};

use super::{Links, chart, cpu, memory};
use crate::model::{Container, Fleet, UpdaterAction, Workload};

/// The workload's section (a page of its own when served; one of many in a report).
pub fn section(w: &Workload, fleet: &Fleet, links: Links) -> Markup {
    html! {
        section.workload-page id=(super::anchor(&w.namespace, &w.vpa)) data-namespace=(w.namespace) data-vpa=(w.vpa) {
            @if links == Links::Report { h2 { (w.namespace) "/" (w.vpa) } }
            p {
                "VPA " b { (w.namespace) "/" (w.vpa) } " sizes " (w.kind) " " b { (w.name) } " in mode " b { (w.mode) }
                @if let Some(p) = &w.profile { " with profile " b { (p) } }
                "; " (w.pods) (if w.pods == 1 { " running pod; " } else { " running pods; " }) span.(if w.ooms_last_day > 0 { "warn" } else { "muted" }) #ooms data-ooms=(w.ooms_last_day) { (w.ooms_last_day) " OOM kills in the last day" } "."
            }
            @if w.admitted_unsized > 0 {
                p.warn #admitted-unsized data-count=(w.admitted_unsized) {
                    (w.admitted_unsized) " running pods were never sized by Tailor: admitted without its webhook (it was unreachable, the pods came before their VPA, or it does not see their namespace) and not resized in place since."
                }
            }
            @if let Some(f) = &w.instance_family {
                p.muted #family data-family=(f) {
                    "Most pods run on instance family " b { (f) } ": "
                    @if fleet.prices.families.contains_key(&**f) { "its own prices apply." } @else { "no price of its own, the defaults apply." }
                    " Per month: " (super::money(w.requested_monthly(&fleet.prices), &fleet.prices.currency)) " requested, "
                    (super::money(w.recommended_monthly(&fleet.prices), &fleet.prices.currency)) " at the targets."
                }
            }
            @if !w.flags.is_empty() {
                p { "Needs a look: " @for f in &w.flags { span.flag data-flag=(format!("{f:?}")) { (f.label()) } } }
            }
            @for c in &w.containers { (container(c, &fleet.prices.currency)) }
            h3 { "Conditions" }
            table.conditions {
                tr { th.l { "Type" } th.l { "Status" } th.l { "Reason" } th.l { "Message" } }
                @for c in w.conditions.iter() {
                    tr data-type=(c.type_) { td.l { (c.type_) } td.l { (c.status) } td.l { (c.reason) } td.l { (c.message) } }
                }
            }
            (actions(&w.updater_actions))
            @if !w.explain.is_empty() { h3 { "Why these numbers" } pre.explain { (w.explain) } }
            h3 { "The same object with kubectl" }
            pre.kubectl { "kubectl get verticalpodautoscalers." (w.api_group.name()) " -n " (w.namespace) " " (w.vpa) " -o yaml" }
            @if links == Links::Server { p { a href="/" { "← the fleet" } } }
        }
    }
}

fn actions(actions: &[UpdaterAction]) -> Markup {
    html! {
        h3 { "The updater's last actions" }
        @if actions.is_empty() {
            p.muted #no-actions { "None recorded: no eviction, resize or skip of this VPA's pods in the events the cluster keeps." }
        } @else {
            table #actions {
                tr { th.l { "Time" } th.l { "Type" } th.l { "Reason" } th.l { "On" } th.l { "Message" } }
                @for a in actions {
                    tr.action data-reason=(a.reason) {
                        td.l { (a.time) } td.l.(if a.type_ == "Warning" { "warn" } else { "" }) { (a.type_) }
                        td.l { (a.reason) } td.l { (a.object) } td.l { (a.message) }
                    }
                }
            }
        }
    }
}

fn container(c: &Container, _currency: &str) -> Markup {
    let rows = [
        ("requests", c.requests),
        ("limits", c.limits),
        ("target", c.target),
        ("lowerBound", c.lower_bound),
        ("upperBound", c.upper_bound),
        ("uncappedTarget", c.uncapped_target),
    ];
    html! {
        h3 { "Container " (c.name) }
        table.container data-container=(c.name) {
            tr { th.l { "" } th { "CPU" } th { "Memory" } }
            @for (what, r) in rows {
                tr data-row=(what) {
                    td.l { (what) }
                    td.cpu data-millicores=(r.cpu_millicores().unwrap_or(0)) { (cpu(r.cpu_millicores())) }
                    td.memory data-bytes=(r.memory_bytes().unwrap_or(0)) { (memory(r.memory_bytes())) }
                }
            }
        }
        @if let Some(d) = c.cpu_usage.as_ref().map(|u| u.distribution()) {
            p.muted { "CPU usage distribution (cores):" }
            (chart::usage("cpu", &d, c.requests.cpu_millicores().map(|m| m as f64 / 1000.0),
                c.target.cpu_millicores().map(|m| m as f64 / 1000.0), |v| cpu(Some((v * 1000.0).round() as i64))))
        }
        @if let Some(d) = c.memory_usage.as_ref().map(|u| u.distribution()) {
            p.muted { "Memory peak distribution (bytes):" }
            (chart::usage("memory", &d, c.requests.memory_bytes().map(|b| b as f64),
                c.target.memory_bytes().map(|b| b as f64), |v| memory(Some(v.round() as i64))))
        }
    }
}
