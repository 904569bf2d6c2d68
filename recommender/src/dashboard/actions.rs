//! The updater's last actions, for the workload pages: the events `tailor-updater` records (evictions,
//! resizes, skips, blocks), watched with a field selector on their reporting component, so the recommender
//! reads no other events for them. Kept per object (`Pod/NAME` or `VerticalPodAutoscaler/NAME`), bounded:
//! [`MAX_PER_OBJECT`] each, [`MAX_OBJECTS`] objects (the least recently acted on go first), messages cut to
//! [`MAX_MESSAGE`] bytes.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Event;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tailor_dashboard::model::UpdaterAction;
use tokio::task::JoinHandle;

use crate::error::Error;
use crate::process::metrics::Metrics;

/// The component the updater records its events as.
pub const UPDATER_COMPONENT: &str = "tailor-updater";
/// Actions kept per object.
pub const MAX_PER_OBJECT: usize = 5;
/// Objects kept.
pub const MAX_OBJECTS: usize = 4_096;
/// Longest message kept, in bytes.
pub const MAX_MESSAGE: usize = 256;

/// One kept action: the event's uid (a repeat of the same event replaces it) and what the page shows.
#[derive(Clone, Debug)]
struct Kept {
    uid: Box<str>,
    /// Nanoseconds since the epoch, for ordering.
    at: i64,
    action: UpdaterAction,
}

/// `(namespace, kind, name)` of the object an event is about.
type ObjectKey = (Box<str>, Box<str>, Box<str>);

/// The actions by object, shared by the watch (writer) and the loop's snapshot (reader).
#[derive(Clone, Debug, Default)]
pub struct UpdaterActions {
    inner: Arc<Mutex<HashMap<ObjectKey, VecDeque<Kept>>>>,
}

impl UpdaterActions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, VecDeque<Kept>>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `event` if the updater recorded it on a pod or a VPA.
    pub fn record(&self, event: &Event) {
        let Some((key, kept)) = kept(event) else {
            return;
        };
        let mut map = self.lock();
        if !map.contains_key(&key) && map.len() >= MAX_OBJECTS {
            forget_oldest_half(&mut map);
        }
        let list = map.entry(key).or_default();
        list.retain(|k| k.uid != kept.uid);
        let at = list
            .iter()
            .position(|k| k.at <= kept.at)
            .unwrap_or(list.len());
        list.insert(at, kept);
        list.truncate(MAX_PER_OBJECT);
    }

    /// The actions on `namespace`'s objects `(kind, name)`, newest first, at most `max`.
    pub fn on<'a>(
        &self,
        namespace: &str,
        objects: impl Iterator<Item = (&'a str, &'a str)>,
        max: usize,
    ) -> Vec<UpdaterAction> {
        let map = self.lock();
        let mut all: Vec<&Kept> = objects
            .filter_map(|(kind, name)| map.get(&(namespace.into(), kind.into(), name.into())))
            .flatten()
            .collect();
        all.sort_by_key(|k| std::cmp::Reverse(k.at));
        all.into_iter()
            .take(max)
            .map(|k| k.action.clone())
            .collect()
    }

    /// Objects held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Drops the half of the objects whose newest action is oldest.
fn forget_oldest_half(map: &mut HashMap<ObjectKey, VecDeque<Kept>>) {
    let mut newest: Vec<i64> = (map.values())
        .map(|l| l.front().map_or(i64::MIN, |k| k.at))
        .collect();
    let mid = newest.len() / 2;
    let (_, cut, _) = newest.select_nth_unstable(mid);
    let cut = *cut;
    map.retain(|_, l| l.front().is_some_and(|k| k.at > cut));
}

/// The event as a kept action, keyed by its object; `None` for objects other than pods and VPAs or an
/// event without a uid.
fn kept(e: &Event) -> Option<(ObjectKey, Kept)> {
    let o = &e.involved_object;
    let kind = o.kind.as_deref()?;
    if kind != "Pod" && kind != "VerticalPodAutoscaler" {
        return None;
    }
    let namespace = o.namespace.as_deref().or(e.metadata.namespace.as_deref())?;
    let name = o.name.as_deref()?;
    let uid = e.metadata.uid.as_deref()?;
    let time = (e
        .series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref())
        .map(|t| t.0))
    .or_else(|| e.last_timestamp.as_ref().map(|t| t.0))
    .or_else(|| e.event_time.as_ref().map(|t| t.0))
    .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0));
    let cut = |s: Option<&str>, n| tailor_core::text::cut(s.unwrap_or_default(), n);
    let action = UpdaterAction {
        time: time.map(|t| format!("{t:.0}")).unwrap_or_default(),
        type_: cut(e.type_.as_deref(), 16),
        reason: cut(e.reason.as_deref(), 64),
        object: format!("{kind}/{}", cut(Some(name), 253)),
        message: cut(e.message.as_deref(), MAX_MESSAGE),
    };
    let at = time.map_or(0, |t| i64::try_from(t.as_nanosecond()).unwrap_or(i64::MAX));
    let key = (namespace.into(), kind.into(), name.into());
    Some((
        key,
        Kept {
            uid: uid.into(),
            at,
            action,
        },
    ))
}

/// Watches the updater's events (`namespace` empty = all) into `actions`; stops for good when events may
/// not be listed (the pages then show no actions).
pub fn spawn_watch(
    client: &Client,
    namespace: &str,
    actions: UpdaterActions,
    metrics: Arc<Metrics>,
) -> JoinHandle<()> {
    let events: Api<Event> = if namespace.is_empty() {
        Api::all(client.clone())
    } else {
        Api::namespaced(client.clone(), namespace)
    };
    tokio::spawn(async move {
        let cfg =
            watcher::Config::default().fields(&format!("reportingComponent={UPDATER_COMPONENT}"));
        let mut stream = watcher(events, cfg).default_backoff().boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Apply(e)) | Ok(watcher::Event::InitApply(e)) => {
                    actions.record(&e)
                }
                Ok(_) => {}
                Err(e) => {
                    let forbidden = crate::views::stores::is_forbidden(&e);
                    metrics.record(&Error::Watch {
                        kind: "Event",
                        message: e.to_string(),
                    });
                    if forbidden {
                        tracing::warn!(error = %e, "not allowed to list/watch events: the dashboard shows no updater actions");
                        return;
                    }
                    tracing::warn!(error = %e, "watching the updater's events; retrying");
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(uid: &str, kind: &str, name: &str, reason: &str, secs: i64) -> Event {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "shop", "uid": uid,
                "creationTimestamp": format!("2026-11-29T00:00:{secs:02}Z")},
            "involvedObject": {"kind": kind, "name": name, "namespace": "shop"},
            "reason": reason, "type": "Normal",
            "message": "m".repeat(1000),
            "reportingComponent": UPDATER_COMPONENT
        }))
        .unwrap()
    }

    #[test]
    fn actions_are_kept_per_object_newest_first_and_bounded() {
        let a = UpdaterActions::default();
        a.record(&event("e1", "Pod", "web-1", "InPlaceResizedByVPA", 1));
        a.record(&event(
            "e2",
            "VerticalPodAutoscaler",
            "web",
            "EvictedPod",
            3,
        ));
        a.record(&event("e3", "Node", "n1", "Whatever", 4));
        // A repeat of e1 (its series went on) replaces it.
        a.record(&event("e1", "Pod", "web-1", "InPlaceResizedByVPA", 5));
        let got = a.on(
            "shop",
            [("VerticalPodAutoscaler", "web"), ("Pod", "web-1")].into_iter(),
            10,
        );
        let reasons: Vec<&str> = got.iter().map(|x| x.reason.as_str()).collect();
        assert_eq!(reasons, ["InPlaceResizedByVPA", "EvictedPod"]);
        assert_eq!(got[0].time, "2026-11-29T00:00:05Z");
        assert_eq!(got[0].object, "Pod/web-1");
        // Cut, with the full length said after the cut.
        assert!(
            got[0].message.len() < MAX_MESSAGE + 32,
            "{}",
            got[0].message
        );
        assert_eq!(a.len(), 2, "the Node's event is not the updater's business");
        for i in 0..20 {
            a.record(&event(
                &format!("r{i}"),
                "Pod",
                "web-2",
                "EvictedByVPA",
                i % 60,
            ));
        }
        assert_eq!(
            a.on("shop", [("Pod", "web-2")].into_iter(), 100).len(),
            MAX_PER_OBJECT
        );
    }

    #[test]
    fn past_the_object_bound_the_least_recent_half_goes() {
        let a = UpdaterActions::default();
        for i in 0..=MAX_OBJECTS {
            let secs = i64::try_from(i % 60).unwrap();
            a.record(&event(
                &format!("e{i}"),
                "Pod",
                &format!("p{i}"),
                "EvictedByVPA",
                secs,
            ));
        }
        assert!(a.len() <= MAX_OBJECTS / 2 + 1, "{}", a.len());
        assert!(!a.is_empty());
    }
}
