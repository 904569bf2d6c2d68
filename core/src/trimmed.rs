//! The one way Tailor makes a trimmed copy of an API object (the fields a cache keeps, deserialised from
//! the full object) usable with kube's reflectors and `Api`: [`crate::trimmed_resource!`] implements
//! `k8s_openapi::Resource` (the object's API coordinates) and `k8s_openapi::Metadata` (its `metadata`
//! field) for it.

/// Implements `k8s_openapi::Resource` and `k8s_openapi::Metadata` for a trimmed type with a
/// `metadata: ObjectMeta` field. Either the API coordinates come from the full type it trims:
///
/// ```ignore
/// tailor_core::trimmed_resource!(WatchedPod => k8s_openapi::api::core::v1::Pod);
/// tailor_core::trimmed_resource!([K: WorkloadKind] SlimWorkload<K> => K);
/// ```
///
/// or, for a custom resource without a `k8s_openapi` type, they are spelled out (group, version, kind,
/// plural, scope):
///
/// ```ignore
/// tailor_core::trimmed_resource!(NodePool: "karpenter.sh", "v1", "NodePool", "nodepools", Cluster);
/// ```
#[macro_export]
macro_rules! trimmed_resource {
    ([$($generics:tt)*] $trimmed:ty => $full:ty) => {
        impl<$($generics)*> k8s_openapi::Resource for $trimmed {
            const API_VERSION: &'static str = <$full as k8s_openapi::Resource>::API_VERSION;
            const GROUP: &'static str = <$full as k8s_openapi::Resource>::GROUP;
            const KIND: &'static str = <$full as k8s_openapi::Resource>::KIND;
            const VERSION: &'static str = <$full as k8s_openapi::Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str = <$full as k8s_openapi::Resource>::URL_PATH_SEGMENT;
            type Scope = <$full as k8s_openapi::Resource>::Scope;
        }
        $crate::trimmed_resource!(@metadata [$($generics)*] $trimmed);
    };
    ($trimmed:ty => $full:ty) => {
        $crate::trimmed_resource!([] $trimmed => $full);
    };
    ($trimmed:ty: $group:literal, $version:literal, $kind:literal, $plural:literal, Namespaced) => {
        $crate::trimmed_resource!(@custom $trimmed, $group, $version, $kind, $plural,
            k8s_openapi::NamespaceResourceScope);
    };
    ($trimmed:ty: $group:literal, $version:literal, $kind:literal, $plural:literal, Cluster) => {
        $crate::trimmed_resource!(@custom $trimmed, $group, $version, $kind, $plural,
            k8s_openapi::ClusterResourceScope);
    };
    (@custom $trimmed:ty, $group:literal, $version:literal, $kind:literal, $plural:literal, $scope:ty) => {
        impl k8s_openapi::Resource for $trimmed {
            const API_VERSION: &'static str = concat!($group, "/", $version);
            const GROUP: &'static str = $group;
            const KIND: &'static str = $kind;
            const VERSION: &'static str = $version;
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = $scope;
        }
        $crate::trimmed_resource!(@metadata [] $trimmed);
    };
    (@metadata [$($generics:tt)*] $trimmed:ty) => {
        impl<$($generics)*> k8s_openapi::Metadata for $trimmed {
            type Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
            fn metadata(&self) -> &Self::Ty {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut Self::Ty {
                &mut self.metadata
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use k8s_openapi::Resource;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    struct Trimmed {
        metadata: ObjectMeta,
    }
    crate::trimmed_resource!(Trimmed => k8s_openapi::api::apps::v1::Deployment);

    struct Custom {
        metadata: ObjectMeta,
    }
    crate::trimmed_resource!(Custom: "karpenter.sh", "v1", "NodePool", "nodepools", Cluster);

    #[test]
    fn coordinates_are_the_full_types_or_the_spelled_out_ones() {
        assert_eq!(
            (
                Trimmed::API_VERSION,
                Trimmed::KIND,
                Trimmed::URL_PATH_SEGMENT
            ),
            ("apps/v1", "Deployment", "deployments")
        );
        assert_eq!(
            (Custom::API_VERSION, Custom::GROUP, Custom::VERSION),
            ("karpenter.sh/v1", "karpenter.sh", "v1")
        );
        let mut t = Trimmed {
            metadata: ObjectMeta::default(),
        };
        k8s_openapi::Metadata::metadata_mut(&mut t).name = Some("web".into());
        assert_eq!(
            k8s_openapi::Metadata::metadata(&t).name.as_deref(),
            Some("web")
        );
        let c = Custom {
            metadata: ObjectMeta::default(),
        };
        assert!(k8s_openapi::Metadata::metadata(&c).name.is_none());
    }
}
