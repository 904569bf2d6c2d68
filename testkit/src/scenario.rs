//! Typed API scenarios: a [`kube::Client`] whose API server is the test. [`api_server`] gives the client and
//! the [`ApiServer`] that answers it, in one of three ways:
//!
//! - a named [`Scenario`], in the style of kube-rs's controller-rs `ApiServerVerifier`: the requests the code
//!   must make, in order, each asserted by method and path (and by query or body where the test cares) and
//!   answered with a [`Reply`]. [`ApiServer::verify`] runs it beside the code under test and fails the test,
//!   under the scenario's name, on a request missing, unexpected or out of order;
//! - step by step, when the test acts between two requests: [`ApiServer::expect`], [`ApiServer::pending`],
//!   [`ApiServer::quiet`];
//! - a stateful fake, [`ApiServer::serve`]: every request goes to a handler that routes it over state the test
//!   owns, and the [`Journal`] keeps what was asked.
//!
//! A [`Reply`] is typed: an object, a list, a watch stream (left open after its events) or a `Status` with its
//! code.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test support: a panic is a failure report

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::panic::resume_unwind;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::{FutureExt as _, StreamExt as _, stream};
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};
use kube::Client;
use kube::api::WatchEvent;
use kube::client::Body;
use serde::Serialize;
use serde_json::{Value, json};

/// The body of an answer: one JSON document, or a stream of watch events.
pub type ReplyBody = BoxBody<Bytes, Infallible>;
type Handle = tower_test::mock::Handle<Request<Body>, Response<ReplyBody>>;
type Sender = tower_test::mock::SendResponse<Response<ReplyBody>>;

/// How long [`ApiServer`] waits for an expected request unless [`ApiServer::within`] says otherwise; a test
/// under a paused clock may wait through retries and intervals first.
pub const WAIT: Duration = Duration::from_secs(60);

/// A client of `default_namespace` and the API server that answers it.
pub fn api_server(default_namespace: &str) -> (Client, ApiServer) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<ReplyBody>>();
    let api = ApiServer {
        handle,
        name: "API server".to_owned(),
        wait: WAIT,
        waiting: None,
        received: Vec::new(),
        held: Vec::new(),
    };
    (Client::new(service, default_namespace), api)
}

/// A request as the API server received it.
#[derive(Clone, Debug, PartialEq)]
pub struct Received {
    /// `GET`, `POST`, `PUT`, `PATCH`, `DELETE`.
    pub method: Method,
    /// The path, without the query.
    pub path: String,
    /// The query, empty when there is none.
    pub query: String,
    /// The JSON body, `Null` when there is none.
    pub body: Value,
}

impl Received {
    /// Path and query, as the client wrote them.
    pub fn uri(&self) -> String {
        match self.query.as_str() {
            "" => self.path.clone(),
            query => format!("{}?{query}", self.path),
        }
    }

    /// Whether it is `method` on `path`.
    pub fn is(&self, method: &Method, path: &str) -> bool {
        self.method == method && self.path == path
    }

    async fn read(request: Request<Body>) -> Received {
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.expect("the request's body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                panic!("{} {}: the body is not JSON: {e}", parts.method, parts.uri)
            })
        };
        Received {
            method: parts.method,
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().unwrap_or_default().to_owned(),
            body,
        }
    }
}

impl fmt::Display for Received {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.uri())
    }
}

/// An answer: a status code, a body, and how long the API server takes to send it.
#[derive(Clone, Debug)]
pub struct Reply {
    code: StatusCode,
    payload: Payload,
    after: Option<Duration>,
}

#[derive(Clone, Debug)]
enum Payload {
    Json(Bytes),
    /// One line per event, then the stream stays open.
    Watch(Vec<Bytes>),
}

fn to_json<T: Serialize + ?Sized>(value: &T) -> Bytes {
    Bytes::from(serde_json::to_vec(value).expect("a reply serializes"))
}

/// A `Failure` Status with `code`, `reason` and the reason as message, as the API server answers an error.
pub fn failure(code: StatusCode, reason: &str) -> Status {
    Status {
        code: Some(i32::from(code.as_u16())),
        message: Some(reason.to_owned()),
        reason: Some(reason.to_owned()),
        status: Some("Failure".to_owned()),
        ..Status::default()
    }
}

/// [`failure`] with `details.causes` of these `(reason, message)` pairs (a message may be empty).
pub fn failure_with_causes(code: StatusCode, reason: &str, causes: &[(&str, &str)]) -> Status {
    let causes = causes.iter().map(|(reason, message)| StatusCause {
        reason: Some((*reason).to_owned()),
        message: (!message.is_empty()).then(|| (*message).to_owned()),
        ..StatusCause::default()
    });
    Status {
        details: Some(StatusDetails {
            causes: Some(causes.collect()),
            ..StatusDetails::default()
        }),
        ..failure(code, reason)
    }
}

impl Reply {
    /// `200 OK` with `object` (any typed object: a Kubernetes resource, a `Scale`, an `APIResourceList`).
    pub fn object<K: Serialize>(object: &K) -> Reply {
        Reply {
            code: StatusCode::OK,
            payload: Payload::Json(to_json(object)),
            after: None,
        }
    }

    /// `200 OK` with a list of `items` at `resource_version`, its kind `K`'s kind plus `List`.
    pub fn list<K>(items: &[K], resource_version: &str) -> Reply
    where
        K: kube::Resource + Serialize,
        K::DynamicType: Default,
    {
        let dt = K::DynamicType::default();
        Reply::json(json!({
            "apiVersion": K::api_version(&dt),
            "kind": format!("{}List", K::kind(&dt)),
            "metadata": {"resourceVersion": resource_version},
            "items": items,
        }))
    }

    /// `200 OK` with a watch stream: `events`, one per line, then the stream stays open without more.
    pub fn watch<K: Serialize>(events: &[WatchEvent<K>]) -> Reply {
        let lines = events.iter().map(|event| {
            let mut line = serde_json::to_vec(event).expect("a watch event serializes");
            line.push(b'\n');
            Bytes::from(line)
        });
        Reply {
            code: StatusCode::OK,
            payload: Payload::Watch(lines.collect()),
            after: None,
        }
    }

    /// `status`, with its code as the HTTP status (`200` when it has none).
    pub fn status(status: &Status) -> Reply {
        let code = status.code.and_then(|c| u16::try_from(c).ok());
        let code = code.and_then(|c| StatusCode::from_u16(c).ok());
        Reply::object(status).code(code.unwrap_or(StatusCode::OK))
    }

    /// The Status of [`failure`]`(code, reason)`.
    pub fn error(code: StatusCode, reason: &str) -> Reply {
        Reply::status(&failure(code, reason))
    }

    /// `200 OK` with an untyped document: what the client sent, echoed, or a shape no type has.
    pub fn json(body: Value) -> Reply {
        Reply {
            code: StatusCode::OK,
            payload: Payload::Json(to_json(&body)),
            after: None,
        }
    }

    /// The same answer with another status code.
    pub fn code(mut self, code: StatusCode) -> Reply {
        self.code = code;
        self
    }

    /// The same answer, sent `delay` after the request (other requests are answered meanwhile).
    pub fn after(mut self, delay: Duration) -> Reply {
        self.after = Some(delay);
        self
    }

    fn into_response(self) -> Response<ReplyBody> {
        let body = match self.payload {
            Payload::Json(bytes) => Full::new(bytes).boxed(),
            Payload::Watch(lines) => {
                let events = stream::iter(lines).map(|line| Ok(Frame::data(line)));
                BodyExt::boxed(StreamBody::new(events.chain(stream::pending())))
            }
        };
        Response::builder()
            .status(self.code)
            .header("content-type", "application/json")
            .body(body)
            .expect("a response")
    }

    fn send(self, send: Sender) {
        match self.after {
            None => send.send_response(self.into_response()),
            Some(delay) => {
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    send.send_response(self.into_response());
                });
            }
        }
    }
}

/// A request received and not answered yet.
pub struct Pending {
    /// What was asked.
    pub received: Received,
    send: Sender,
}

impl fmt::Debug for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pending")
            .field("received", &self.received)
            .finish_non_exhaustive()
    }
}

impl Pending {
    /// Answers it.
    pub fn reply(self, reply: Reply) {
        reply.send(self.send);
    }

    /// Answers `200 OK` with the body the client sent (an API server storing a write as sent).
    pub fn echo(self) {
        let body = self.received.body.clone();
        self.reply(Reply::json(body));
    }

    /// Leaves it unanswered for as long as the [`Held`] is kept: the client waits (a watch with no events, a
    /// server that does not answer).
    pub fn hold(self) -> Held {
        Held { _send: self.send }
    }
}

/// A request left unanswered while this is kept.
pub struct Held {
    _send: Sender,
}

/// The API server of one [`kube::Client`]: see the module's documentation.
pub struct ApiServer {
    handle: Handle,
    name: String,
    wait: Duration,
    waiting: Option<Pending>,
    received: Vec<Received>,
    held: Vec<Held>,
}

impl fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiServer")
            .field("name", &self.name)
            .field("received", &self.received)
            .finish_non_exhaustive()
    }
}

impl ApiServer {
    /// Waits at most `wait` for each expected request (else [`WAIT`]).
    pub fn within(mut self, wait: Duration) -> ApiServer {
        self.wait = wait;
        self
    }

    /// Every request received so far, in order.
    pub fn received(&self) -> &[Received] {
        &self.received
    }

    /// The body of the last `method` on `path` received.
    pub fn body_of(&self, method: Method, path: &str) -> &Value {
        let found = self.received.iter().rev().find(|r| r.is(&method, path));
        let found = found.unwrap_or_else(|| panic!("{}: no {method} {path} received", self.name));
        &found.body
    }

    async fn next_request(&mut self) -> Option<Pending> {
        if let Some(waiting) = self.waiting.take() {
            return Some(waiting);
        }
        let (request, send) = self.handle.next_request().await?;
        Some(self.receive(request, send).await)
    }

    async fn receive(&mut self, request: Request<Body>, send: Sender) -> Pending {
        let received = Received::read(request).await;
        self.received.push(received.clone());
        Pending { received, send }
    }

    /// The next request, whatever it is; fails the test when none comes within the wait.
    pub async fn next(&mut self) -> Pending {
        let wait = self.wait;
        match tokio::time::timeout(wait, self.next_request()).await {
            Ok(Some(pending)) => pending,
            Ok(None) => panic!("{}: the client is gone, no request will come", self.name),
            Err(_) => panic!("{}: no request within {wait:?}", self.name),
        }
    }

    /// The next request, which must be `method` on `path`.
    pub async fn expect(&mut self, method: Method, path: &str) -> Pending {
        let pending = self.next().await;
        let got = &pending.received;
        assert!(
            got.is(&method, path),
            "{}: expected {method} {path}, got {got}",
            self.name
        );
        pending
    }

    /// Expects `method` on `path`, answers it with `reply` and returns what was sent.
    pub async fn answer(&mut self, method: Method, path: &str, reply: Reply) -> Received {
        let pending = self.expect(method, path).await;
        let received = pending.received.clone();
        pending.reply(reply);
        received
    }

    /// Whether a request is waiting now (kept for [`ApiServer::next`]).
    pub async fn pending(&mut self) -> bool {
        if self.waiting.is_none()
            && let Some(Some((request, send))) = self.handle.next_request().now_or_never()
        {
            self.waiting = Some(self.receive(request, send).await);
        }
        self.waiting.is_some()
    }

    /// Fails the test if a request comes within `period` (a client gone meanwhile is quiet too).
    pub async fn quiet(&mut self, period: Duration) {
        if let Ok(Some(p)) = tokio::time::timeout(period, self.next_request()).await {
            panic!("{}: unexpected {}", self.name, p.received);
        }
    }

    /// Runs `scenario` in the background: each step's request must come, in order.
    pub fn run(mut self, scenario: Scenario) -> Running {
        self.name = format!("scenario `{}`", scenario.name);
        let task = tokio::spawn(async move {
            for (i, step) in scenario.steps.into_iter().enumerate() {
                self.name = format!("scenario `{}`, step {}", scenario.name, i + 1);
                step.play(&mut self).await;
            }
            self.name = format!("scenario `{}`", scenario.name);
            self
        });
        Running { task }
    }

    /// Runs `scenario` beside `code` (the code under test, which makes the requests), then requires every
    /// step done; returns what `code` returned and the server, with the requests it received.
    pub async fn verify<T>(
        self,
        scenario: Scenario,
        code: impl Future<Output = T>,
    ) -> (T, ApiServer) {
        let running = self.run(scenario);
        let out = code.await;
        (out, running.done().await)
    }

    /// Answers every request, in its own time, with what `handler` says (a handler routes each request over
    /// state the test owns); the [`Journal`] holds every request received.
    pub fn serve<H>(mut self, mut handler: H) -> Journal
    where
        H: FnMut(&Received) -> Reply + Send + 'static,
    {
        let journal = Journal::default();
        let kept = journal.clone();
        tokio::spawn(async move {
            if let Some(Pending { received, send }) = self.waiting.take() {
                kept.push(received.clone());
                handler(&received).send(send);
            }
            while let Some((request, send)) = self.handle.next_request().await {
                let received = Received::read(request).await;
                kept.push(received.clone());
                handler(&received).send(send);
            }
        });
        journal
    }
}

/// A scenario running in the background ([`ApiServer::run`]).
#[derive(Debug)]
pub struct Running {
    task: tokio::task::JoinHandle<ApiServer>,
}

impl Running {
    /// Waits for every step; a step's failure fails the test here with its own message. The server returned
    /// keeps the requests held unanswered.
    pub async fn done(self) -> ApiServer {
        match self.task.await {
            Ok(api) => api,
            Err(e) if e.is_panic() => resume_unwind(e.into_panic()),
            Err(e) => panic!("the scenario did not finish: {e}"),
        }
    }
}

/// The requests a served fake received, in order.
#[derive(Clone, Debug, Default)]
pub struct Journal(Arc<Mutex<Vec<Received>>>);

impl Journal {
    fn push(&self, received: Received) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(received);
    }

    /// Every request received since the last `take`.
    pub fn take(&self) -> Vec<Received> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The paths of every request received so far (nothing taken).
    pub fn paths(&self) -> Vec<String> {
        let all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.iter().map(|r| r.path.clone()).collect()
    }
}

type Check = Box<dyn FnOnce(&Received) + Send>;
type Answer = Box<dyn FnOnce(&Received) -> Reply + Send>;

/// A named sequence of expected requests.
pub struct Scenario {
    name: String,
    steps: Vec<Step>,
}

impl Scenario {
    /// An empty scenario called `name` (failures name it).
    pub fn new(name: &str) -> Scenario {
        Scenario {
            name: name.to_owned(),
            steps: Vec::new(),
        }
    }

    /// The scenario, then `step`.
    pub fn then(mut self, step: Step) -> Scenario {
        self.steps.push(step);
        self
    }
}

/// One expected request and its answer.
pub struct Step {
    method: Method,
    path: String,
    query: Vec<String>,
    check: Option<Check>,
    answer: Option<Answer>,
    hold: bool,
}

impl Step {
    /// `method` on `path` (without its query).
    pub fn new(method: Method, path: &str) -> Step {
        Step {
            method,
            path: path.to_owned(),
            query: Vec::new(),
            check: None,
            answer: None,
            hold: false,
        }
    }

    /// `GET path`.
    pub fn get(path: &str) -> Step {
        Step::new(Method::GET, path)
    }

    /// `POST path`.
    pub fn post(path: &str) -> Step {
        Step::new(Method::POST, path)
    }

    /// `PUT path`.
    pub fn put(path: &str) -> Step {
        Step::new(Method::PUT, path)
    }

    /// `PATCH path`.
    pub fn patch(path: &str) -> Step {
        Step::new(Method::PATCH, path)
    }

    /// The query must contain `part` (`watch=true`, `fieldSelector=...`).
    pub fn query(mut self, part: &str) -> Step {
        self.query.push(part.to_owned());
        self
    }

    /// Asserts on the request (its body, the time it came) before it is answered.
    pub fn check(mut self, check: impl FnOnce(&Received) + Send + 'static) -> Step {
        self.check = Some(Box::new(check));
        self
    }

    /// Answers with `reply`.
    pub fn reply(self, reply: Reply) -> Step {
        self.reply_with(move |_| reply)
    }

    /// Answers with what `answer` makes of the request.
    pub fn reply_with(mut self, answer: impl FnOnce(&Received) -> Reply + Send + 'static) -> Step {
        self.answer = Some(Box::new(answer));
        self
    }

    /// Answers `200 OK` with the body sent.
    pub fn echo(self) -> Step {
        self.reply_with(|sent| Reply::json(sent.body.clone()))
    }

    /// Leaves it unanswered for as long as the server returned by [`Running::done`] is kept.
    pub fn hold(mut self) -> Step {
        self.hold = true;
        self
    }

    async fn play(self, api: &mut ApiServer) {
        let pending = api.expect(self.method, &self.path).await;
        let received = &pending.received;
        for part in &self.query {
            assert!(
                received.query.contains(part.as_str()),
                "{}: {received} lacks {part} in its query",
                api.name
            );
        }
        if let Some(check) = self.check {
            check(received);
        }
        match (self.answer, self.hold) {
            (Some(answer), false) => {
                let reply = answer(received);
                pending.reply(reply);
            }
            (None, true) => api.held.push(pending.hold()),
            _ => panic!("{}: a step needs exactly one of a reply or hold", api.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, ListParams, PostParams, WatchParams};

    use super::*;

    fn pod(name: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.to_owned());
        pod
    }

    #[tokio::test]
    async fn a_scenario_answers_its_steps_in_order_and_keeps_what_was_sent() {
        let (client, api) = api_server("default");
        let pods: Api<Pod> = Api::default_namespaced(client);
        let scenario = Scenario::new("list then create")
            .then(
                Step::get("/api/v1/namespaces/default/pods")
                    .query("labelSelector=app%3Dweb")
                    .reply(Reply::list(&[pod("a")], "3")),
            )
            .then(
                Step::post("/api/v1/namespaces/default/pods")
                    .check(|sent| assert_eq!(sent.body["metadata"]["name"], "b"))
                    .reply_with(|sent| Reply::json(sent.body.clone()).code(StatusCode::CREATED)),
            );
        let code = async {
            let listed = pods.list(&ListParams::default().labels("app=web")).await;
            let created = pods.create(&PostParams::default(), &pod("b")).await;
            (listed.unwrap(), created.unwrap())
        };
        let ((listed, created), api) = api.verify(scenario, code).await;
        assert_eq!(listed.metadata.resource_version.as_deref(), Some("3"));
        assert_eq!(listed.items[0].metadata.name.as_deref(), Some("a"));
        assert_eq!(created.metadata.name.as_deref(), Some("b"));
        let sent = api.body_of(Method::POST, "/api/v1/namespaces/default/pods");
        assert_eq!(sent["kind"], "Pod");
    }

    #[tokio::test]
    async fn a_status_reply_is_the_clients_error_with_its_code() {
        let (client, mut api) = api_server("default");
        let pods: Api<Pod> = Api::default_namespaced(client);
        let task = tokio::spawn(async move { pods.get("gone").await });
        let path = "/api/v1/namespaces/default/pods/gone";
        let reply = Reply::error(StatusCode::NOT_FOUND, "NotFound");
        api.answer(Method::GET, path, reply).await;
        let err = task.await.unwrap().unwrap_err();
        assert!(matches!(err, kube::Error::Api(s) if s.code == 404 && s.reason == "NotFound"));
        api.quiet(Duration::from_millis(50)).await;
    }

    #[tokio::test]
    async fn a_watch_stream_delivers_its_events_and_stays_open() {
        let (client, api) = api_server("default");
        let pods: Api<Pod> = Api::default_namespaced(client);
        let journal = api.serve(|_| Reply::watch(&[WatchEvent::Added(pod("a"))]));
        let mut events = pods
            .watch(&WatchParams::default(), "0")
            .await
            .unwrap()
            .boxed();
        let first = events.next().await.unwrap().unwrap();
        assert!(matches!(first, WatchEvent::Added(p) if p.metadata.name.as_deref() == Some("a")));
        let more = tokio::time::timeout(Duration::from_millis(100), events.next()).await;
        assert!(more.is_err(), "the stream stays open");
        assert!(journal.take()[0].query.contains("watch=true"));
    }

    #[tokio::test]
    async fn a_failed_check_fails_the_test_with_its_own_message() {
        let (client, api) = api_server("default");
        let pods: Api<Pod> = Api::default_namespaced(client);
        let check =
            Step::post("/api/v1/namespaces/default/pods").check(|_| panic!("the check failed"));
        let scenario = Scenario::new("a check that fails").then(check.echo());
        let verified = tokio::spawn(async move {
            let (pp, b) = (PostParams::default(), pod("b"));
            api.verify(scenario, pods.create(&pp, &b)).await.0.is_err()
        });
        let failed = verified.await.unwrap_err().into_panic();
        assert_eq!(*failed.downcast_ref::<&str>().unwrap(), "the check failed");
    }

    #[tokio::test]
    async fn a_pending_request_is_kept_for_the_next_step() {
        let (client, mut api) = api_server("default");
        let pods: Api<Pod> = Api::default_namespaced(client);
        assert!(!api.pending().await);
        let task = tokio::spawn(async move { pods.get("a").await });
        while !api.pending().await {
            tokio::task::yield_now().await;
        }
        let path = "/api/v1/namespaces/default/pods/a";
        api.answer(Method::GET, path, Reply::object(&pod("a")))
            .await;
        assert_eq!(
            task.await.unwrap().unwrap().metadata.name.as_deref(),
            Some("a")
        );
    }

    #[tokio::test]
    async fn a_missing_step_fails_under_the_scenarios_name() {
        let (_client, api) = api_server("default");
        let api = api.within(Duration::from_millis(20));
        let running = api.run(Scenario::new("never asked").then(Step::get("/x").echo()));
        let failed = tokio::spawn(running.done()).await.unwrap_err();
        let message = failed.into_panic();
        let message = message.downcast_ref::<String>().unwrap();
        assert!(
            message.contains("scenario `never asked`, step 1"),
            "{message}"
        );
    }
}
