//! What a fleet page asks for in its query string — a namespace, a name filter, a flag, the sort, the page —
//! read within bounds (unknown keys ignored, values cut), and applied to the fleet.

use serde::Serialize;

use crate::model::{Flag, Workload};
use crate::money::Prices;

/// Rows per page.
pub const PAGE_SIZE: usize = 100;
/// Longest value kept of a query parameter.
pub const MAX_VALUE: usize = 253;
/// Most query parameters read.
pub const MAX_PARAMS: usize = 16;
/// Highest page number read.
const MAX_PAGE: usize = 100_000;

/// The column the table is sorted by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Sort {
    /// Namespace, then VPA name.
    #[default]
    Name,
    /// Monthly saving (requested minus recommended cost), largest first.
    Saving,
    /// Requested CPU, largest first.
    Cpu,
    /// Requested memory, largest first.
    Memory,
    /// OOMs in the last day, most first.
    Ooms,
}

impl Sort {
    /// Every column, with its query value.
    pub const ALL: [(Sort, &'static str); 5] = [
        (Sort::Name, "name"),
        (Sort::Saving, "saving"),
        (Sort::Cpu, "cpu"),
        (Sort::Memory, "memory"),
        (Sort::Ooms, "ooms"),
    ];

    fn parse(s: &str) -> Option<Sort> {
        Sort::ALL.iter().find(|(_, v)| *v == s).map(|(k, _)| *k)
    }

    /// The query value.
    pub fn as_str(self) -> &'static str {
        Sort::ALL
            .iter()
            .find(|(k, _)| *k == self)
            .map_or("name", |(_, v)| v)
    }
}

/// A fleet page's query.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetQuery {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only workloads whose namespace, VPA or target name contains this.
    pub search: Option<String>,
    /// Only workloads with this flag.
    pub flag: Option<Flag>,
    /// The sort.
    pub sort: Sort,
    /// 0-based page.
    pub page: usize,
}

fn cut(s: &str) -> String {
    s.chars().take(MAX_VALUE).collect()
}

impl FleetQuery {
    /// Reads `pairs` (decoded `key=value`s); at most [`MAX_PARAMS`] are looked at.
    pub fn parse<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> FleetQuery {
        let mut q = FleetQuery::default();
        for (k, v) in pairs.into_iter().take(MAX_PARAMS) {
            let v = v.trim();
            match k {
                "ns" if !v.is_empty() => q.namespace = Some(cut(v)),
                "q" if !v.is_empty() => q.search = Some(cut(v)),
                "flag" => q.flag = Flag::ALL.into_iter().find(|f| format!("{f:?}") == v),
                "sort" => q.sort = Sort::parse(v).unwrap_or_default(),
                "page" => q.page = v.parse::<usize>().unwrap_or(0).min(MAX_PAGE),
                _ => {}
            }
        }
        q
    }

    /// Whether `w` passes the filters.
    pub fn keeps(&self, w: &Workload) -> bool {
        self.namespace.as_ref().is_none_or(|n| *w.namespace == **n)
            && self.flag.is_none_or(|f| w.flags.contains(f))
            && self.search.as_ref().is_none_or(|s| {
                w.namespace.contains(s.as_str())
                    || w.vpa.contains(s.as_str())
                    || w.name.contains(s.as_str())
            })
    }

    /// The filtered, sorted workloads of the page (`page_size` rows), and how many passed the filters.
    pub fn select<'a>(
        &self,
        workloads: &'a [Workload],
        prices: &Prices,
        page_size: usize,
    ) -> (Vec<&'a Workload>, usize) {
        let mut kept: Vec<&Workload> = workloads.iter().filter(|w| self.keeps(w)).collect();
        let saving = |w: &Workload| w.saving_monthly(prices);
        match self.sort {
            Sort::Name => kept.sort_by(|a, b| (&a.namespace, &a.vpa).cmp(&(&b.namespace, &b.vpa))),
            Sort::Saving => {
                // Each saving priced once, not once per comparison.
                let mut keyed: Vec<(f64, &Workload)> =
                    kept.iter().map(|w| (saving(w), *w)).collect();
                keyed.sort_by(|a, b| b.0.total_cmp(&a.0));
                kept = keyed.into_iter().map(|(_, w)| w).collect();
            }
            Sort::Cpu => kept.sort_by_key(|w| std::cmp::Reverse(w.requested().cpu_millicores())),
            Sort::Memory => kept.sort_by_key(|w| std::cmp::Reverse(w.requested().memory_bytes())),
            Sort::Ooms => kept.sort_by_key(|w| std::cmp::Reverse(w.ooms_last_day)),
        }
        let total = kept.len();
        let page: Vec<&Workload> = (kept.into_iter())
            .skip(self.page.saturating_mul(page_size))
            .take(page_size)
            .collect();
        (page, total)
    }

    /// The query string of this query with `page` (for links).
    pub fn with_page(&self, page: usize) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(n) = &self.namespace {
            out.push(("ns", n.clone()));
        }
        if let Some(s) = &self.search {
            out.push(("q", s.clone()));
        }
        if let Some(f) = self.flag {
            out.push(("flag", format!("{f:?}")));
        }
        out.push(("sort", self.sort.as_str().to_owned()));
        out.push(("page", page.to_string()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_forgiving() {
        let long = "x".repeat(10_000);
        let q = FleetQuery::parse([
            ("ns", long.as_str()),
            ("page", "99999999999"),
            ("sort", "bogus"),
            ("flag", "Oom"),
        ]);
        assert_eq!(q.namespace.as_ref().map(String::len), Some(MAX_VALUE));
        assert_eq!(q.page, MAX_PAGE);
        assert_eq!(q.sort, Sort::Name);
        assert_eq!(q.flag, Some(Flag::Oom));
        let many: Vec<(&str, &str)> = (0..1000)
            .map(|_| ("q", "a"))
            .chain([("ns", "late")])
            .collect();
        assert_eq!(
            FleetQuery::parse(many).namespace,
            None,
            "only the first parameters are read"
        );
    }
}
