//! The binary's budgets ([`Restriction`]) as the iteration's [`Gate`].

use k8s_openapi::jiff::Timestamp;
use tailor_core::quantity::QuantityError;
use tailor_crds::VerticalPodAutoscaler;

use crate::decisions::restriction::{InPlaceDecision, Restriction, RestrictionError};
use crate::decisions::skip::Skip;
use crate::iteration::{Gate, UpdaterState};
use crate::views::pods::{self, CachedPod, ResizeStatus};

impl Gate for Restriction {
    fn can_evict(
        &mut self,
        pod: &CachedPod,
        state: &mut UpdaterState,
        now: Timestamp,
    ) -> Result<(), Skip> {
        Restriction::can_evict(self, pod, &mut state.timers, now)
    }

    fn can_in_place_update(
        &mut self,
        pod: &CachedPod,
        vpa: &VerticalPodAutoscaler,
        state: &mut UpdaterState,
        now: Timestamp,
    ) -> Result<InPlaceDecision, QuantityError> {
        Restriction::can_in_place_update(self, pod, vpa, &state.infeasible, &mut state.timers, now)
    }

    fn can_unboost(
        &mut self,
        pod: &CachedPod,
        vpa: &VerticalPodAutoscaler,
        now: Timestamp,
    ) -> bool {
        Restriction::can_unboost(self, pod, vpa, now)
    }

    fn check_evict(
        &mut self,
        pod: &CachedPod,
        state: &mut UpdaterState,
        now: Timestamp,
    ) -> Result<(), RestrictionError> {
        Restriction::check_evict(self, pod, &mut state.timers, now)
    }

    fn evicted(&mut self, pod: &CachedPod) {
        Restriction::evicted(self, pod);
    }

    fn check_in_place(&mut self, pod: &CachedPod) -> Result<(), RestrictionError> {
        Restriction::check_in_place(self, pod)
    }

    fn in_place_started(&mut self, pod: &CachedPod, state: &mut UpdaterState, now: Timestamp) {
        Restriction::in_place_started(self, pod, &mut state.timers, now);
    }

    fn deferral_reason(&self, pod: &CachedPod) -> Skip {
        if !self.contains(pod) {
            Skip::BelowMinReplicas
        } else if pods::is_pending(pod) {
            Skip::Pending
        } else if pods::resize_status(pod) == ResizeStatus::Deferred {
            Skip::ResizeDeferred
        } else if pods::is_in_place_updating(pod) {
            Skip::ResizeInProgress
        } else {
            Skip::ToleranceExhausted
        }
    }
}
