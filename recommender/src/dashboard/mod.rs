//! The dashboard the recommender serves (docs/dashboard.md): the fleet and each workload, read-only, from
//! what the recommender already holds. After each loop the leader publishes a [`Fleet`] built from its
//! model and caches ([`snapshot`]); the pages ([`server`]) read the last one. No page view makes a request
//! to the API server.

pub mod actions;
pub mod cache;
pub mod server;
pub mod snapshot;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwapOption;
use tailor_dashboard::model::{Fleet, Source, Workload};
use tailor_dashboard::money::{InvalidPrice, Prices};
use tailor_dashboard::summary::Summary;
use tailor_engine::units::Nanos;

/// The dashboard's flags (`--dashboard-*`, `--price-*`).
#[derive(Debug, Clone, clap::Args)]
pub struct DashboardFlags {
    /// Address of the read-only dashboard (`:8943` = all interfaces); empty: no dashboard.
    #[arg(long, default_value = "")]
    pub dashboard_address: String,
    /// Price of one vCPU for an hour, for the dashboard's costs (default: Google Compute Engine's E2
    /// on-demand price in us-central1, from its public price list).
    #[arg(long, default_value_t = tailor_dashboard::money::DEFAULT_VCPU_HOUR)]
    pub price_vcpu_hour: f64,
    /// Price of one GiB of memory for an hour (default: the same list's E2 memory price).
    #[arg(long, default_value_t = tailor_dashboard::money::DEFAULT_GIB_HOUR)]
    pub price_gib_hour: f64,
    /// Currency of the prices.
    #[arg(long, default_value = "USD")]
    pub price_currency: String,
    /// Prices of an instance family, `FAMILY=VCPU_HOUR/GIB_HOUR` (repeatable): workloads whose pods run
    /// mostly on nodes of that family (Karpenter's or GKE's family label, else the instance type up to its
    /// first dot) are priced with them. Needs node fit's node cache.
    #[arg(long, value_name = "FAMILY=VCPU_HOUR/GIB_HOUR")]
    pub price_instance_family: Vec<String>,
}

impl DashboardFlags {
    /// The address to serve on (`None`: no dashboard) and the prices; an error names the bad flag.
    pub fn settings(&self) -> Result<Option<(SocketAddr, Prices)>, String> {
        let a = self.dashboard_address.trim();
        if a.is_empty() {
            return Ok(None);
        }
        let text = if a.starts_with(':') {
            format!("0.0.0.0{a}")
        } else {
            a.to_owned()
        };
        let addr = text
            .parse()
            .map_err(|e| format!("--dashboard-address {a:?}: {e}"))?;
        let prices = Prices::new(
            self.price_vcpu_hour,
            self.price_gib_hour,
            &self.price_currency,
        )
        .map_err(|e: InvalidPrice| format!("--price-*: {e}"))?
        .with_families(&self.price_instance_family)
        .map_err(|e| format!("--price-instance-family: {e}"))?;
        Ok(Some((addr, prices)))
    }
}

/// Whether this replica holds the model.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Role {
    /// Waiting for the leader lease (named here, when known).
    Standby(Option<String>),
    /// Leading: publishes after each loop.
    Leader,
}

/// One loop's fleet as the pages read it: the fleet, its totals (summed once, not per view), and the pages
/// already rendered from it (dropped with it at the next publish).
#[derive(Debug)]
pub struct Published {
    /// The fleet.
    pub fleet: Fleet,
    /// Its totals.
    pub summary: Summary,
    /// Rendered answers.
    pub cache: cache::ResponseCache,
}

/// What the pages read: the last published fleet and this replica's role.
#[derive(Debug)]
pub struct DashboardState {
    fleet: ArcSwapOption<Published>,
    role: Mutex<Role>,
    prices: Prices,
    producer: String,
    actions: actions::UpdaterActions,
}

impl DashboardState {
    /// A standby replica's state (`lease`: where the leader is recorded, for the standby's answer).
    pub fn new(prices: Prices, lease: Option<String>) -> Self {
        let pod = std::env::var("POD_NAME").unwrap_or_else(|_| "this process".into());
        DashboardState {
            fleet: ArcSwapOption::empty(),
            role: Mutex::new(match lease {
                Some(l) => Role::Standby(Some(l)),
                None => Role::Leader,
            }),
            prices,
            producer: format!("tailor-recommender {pod}"),
            actions: actions::UpdaterActions::default(),
        }
    }

    /// The updater's last actions, which [`actions::spawn_watch`] fills.
    pub fn actions(&self) -> &actions::UpdaterActions {
        &self.actions
    }

    fn role(&self) -> std::sync::MutexGuard<'_, Role> {
        self.role.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This replica now leads.
    pub fn lead(&self) {
        *self.role() = Role::Leader;
    }

    /// This replica no longer leads (the lease was lost): the fleet it published is dropped, and the pages
    /// say so instead of showing numbers nobody updates.
    pub fn stand_by(&self) {
        *self.role() = Role::Standby(None);
        self.fleet.store(None);
    }

    /// Publishes the workloads of the loop that ran at `now`.
    pub fn publish(&self, mut workloads: Vec<Workload>, now: Nanos) {
        workloads.sort_by(|a, b| (&a.namespace, &a.vpa).cmp(&(&b.namespace, &b.vpa)));
        let generated_at = crate::time::to_time_secs(now)
            .map(|t| t.0.to_string())
            .unwrap_or_default();
        let fleet = Fleet {
            source: Source {
                producer: self.producer.clone(),
                generated_at,
                kubectl_context: None,
            },
            prices: self.prices.clone(),
            workloads,
        };
        let summary = Summary::of(&fleet.workloads, &fleet.prices);
        self.fleet.store(Some(Arc::new(Published {
            fleet,
            summary,
            cache: cache::ResponseCache::default(),
        })));
    }

    /// The last published fleet, while this replica leads.
    pub fn fleet(&self) -> Option<Arc<Published>> {
        if *self.role() != Role::Leader {
            return None;
        }
        self.fleet.load_full()
    }

    /// Why [`DashboardState::fleet`] has nothing.
    pub fn unavailable_reason(&self) -> String {
        match &*self.role() {
            Role::Standby(lease) => format!(
                "{} is on standby: only the recommender holding the leader lease{} holds the model. \
                 Reach the leader's pod (kubectl port-forward to it), or reload: the Service may pick another \
                 replica.",
                self.producer,
                lease
                    .as_ref()
                    .map(|l| format!(" ({l})"))
                    .unwrap_or_default()
            ),
            Role::Leader => {
                "the first recommendation loop has not finished yet; reload in a moment".into()
            }
        }
    }
}
