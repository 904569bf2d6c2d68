//! Answers for the mocked API server (kube-rs `Client` over a tower-test service) the cluster-mode tests share.

use http::{Response, StatusCode};
use kube::client::Body;
use serde_json::Value;

/// Answers a mocked API request with `status` and the JSON `body`.
pub fn respond(
    send: tower_test::mock::SendResponse<Response<Body>>,
    status: StatusCode,
    body: Value,
) {
    send.send_response(
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&body).expect("json")))
            .expect("response"),
    );
}
