"""A SigV4-checking reverse proxy for tests, standing in for Amazon Managed Prometheus on loopback.

Every /api/v1/* request must carry a valid AWS Signature Version 4 (checked by botocore, an implementation
independent of the Rust client's), else it is answered 403 the way AWS words it; valid requests are forwarded
to the upstream Prometheus-compatible server and the answer is gzip-compressed when the client accepts it.
GET /stats counts the answers sent gzip-compressed and plain. The same port also plays STS (AssumeRoleWithWebIdentity, for IRSA) and the EKS Pod Identity agent, each
issuing temporary credentials that are then accepted.

Usage: sigv4_proxy.py CONFIG.json; prints "listening PORT" once ready. CONFIG:
  {"upstream": "http://127.0.0.1:8428", "region": "us-east-1", "service": "aps",
   "keys": {"AKID": {"secret": "...", "token": null}},
   "web_identity": {"token": "...", "role_arn": "...", "issue": "AKID"},
   "pod_identity": {"authorization": "...", "issue": "AKID"}}
"""

import datetime
import gzip
import hmac
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

CONFIG = {}
STATS = {"gzip": 0, "plain": 0}
AUTH_RE = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request,\s*"
    r"SignedHeaders=([^,]+),\s*Signature=([0-9a-f]{64})$"
)


def check_signature(method, path, headers, body):
    """None when the request is signed right, else why not."""
    lower = {k.lower(): v for k, v in headers.items()}
    m = AUTH_RE.match(lower.get("authorization", ""))
    if not m:
        return "Missing or malformed Authorization header"
    akid, day, region, service, signed, signature = m.groups()
    if region != CONFIG["region"] or service != CONFIG["service"]:
        return f"Credential should be scoped to {CONFIG['region']}/{CONFIG['service']}, not {region}/{service}"
    key = CONFIG["keys"].get(akid)
    if key is None:
        return "The security token included in the request is invalid (unknown access key)"
    amz_date = lower.get("x-amz-date", "")
    try:
        at = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return "Missing or malformed X-Amz-Date"
    if abs((datetime.datetime.now(datetime.timezone.utc) - at).total_seconds()) > 300 or amz_date[:8] != day:
        return "Signature expired or dated outside its scope"
    names = signed.split(";")
    if "host" not in names:
        return "Host is not signed"
    if key.get("token") is not None:
        if lower.get("x-amz-security-token") != key["token"] or "x-amz-security-token" not in names:
            return "The security token included in the request is invalid"
    if any(n not in lower for n in names):
        return "A signed header is missing"
    req = AWSRequest(
        method=method,
        url=f"http://{lower['host']}{path}",
        data=body,
        headers={n: lower[n] for n in names},
    )
    req.context["timestamp"] = amz_date
    auth = SigV4Auth(Credentials(akid, key["secret"], key.get("token")), service, region)
    expected = auth.signature(auth.string_to_sign(req, auth.canonical_request(req)), req)
    if not hmac.compare_digest(expected, signature):
        return (
            "The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method."
        )
    return None


def issued(name):
    key = CONFIG["keys"][name]
    return name, key["secret"], key["token"]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("sigv4-proxy: " + (fmt % args) + "\n")

    def reply(self, status, body, content_type="application/json"):
        data = body.encode() if isinstance(body, str) else body
        headers = {"Content-Type": content_type}
        if "gzip" in self.headers.get("Accept-Encoding", "") and status == 200:
            data = gzip.compress(data)
            headers["Content-Encoding"] = "gzip"
            STATS["gzip"] += 1
        else:
            STATS["plain"] += 1
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def handle_any(self, method):
        body = self.body()
        path = self.path
        if path == "/stats":
            return self.reply(200, json.dumps(STATS))
        if path.startswith("/pod-identity"):
            return self.pod_identity()
        if method == "POST" and path == "/" and b"Action=AssumeRoleWithWebIdentity" in body:
            return self.sts(body)
        if not path.startswith("/api/v1/"):
            return self.reply(404, '{"message":"not found"}')
        why = check_signature(method, path, dict(self.headers.items()), body)
        if why is not None:
            self.log_message("rejected %s: %s", path, why)
            return self.reply(403, json.dumps({"message": why}))
        req = urllib.request.Request(CONFIG["upstream"] + path, data=body or None, method=method)
        if self.headers.get("Content-Type"):
            req.add_header("Content-Type", self.headers["Content-Type"])
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                self.reply(r.status, r.read())
        except urllib.error.HTTPError as e:
            self.reply(e.code, e.read())

    def sts(self, body):
        form = urllib.parse.parse_qs(body.decode())
        wi = CONFIG["web_identity"]
        if form.get("WebIdentityToken") != [wi["token"]] or form.get("RoleArn") != [wi["role_arn"]]:
            return self.reply(
                403,
                "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>"
                "<Message>Not authorized to perform sts:AssumeRoleWithWebIdentity</Message></Error>"
                "<RequestId>1</RequestId></ErrorResponse>",
                "text/xml",
            )
        akid, secret, token = issued(wi["issue"])
        xml = (
            '<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
            "<AssumeRoleWithWebIdentityResult><Credentials>"
            f"<AccessKeyId>{akid}</AccessKeyId><SecretAccessKey>{secret}</SecretAccessKey>"
            f"<SessionToken>{token}</SessionToken><Expiration>2099-01-01T00:00:00Z</Expiration>"
            "</Credentials><SubjectFromWebIdentityToken>system:serviceaccount:tailor:tailor</SubjectFromWebIdentityToken>"
            "<AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/tailor/s</Arn>"
            "<AssumedRoleId>AROAEXAMPLE:s</AssumedRoleId></AssumedRoleUser>"
            "</AssumeRoleWithWebIdentityResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata>"
            "</AssumeRoleWithWebIdentityResponse>"
        )
        self.reply(200, xml, "text/xml")

    def pod_identity(self):
        pi = CONFIG["pod_identity"]
        if self.headers.get("Authorization") != pi["authorization"]:
            return self.reply(401, '{"message":"unauthorized"}')
        akid, secret, token = issued(pi["issue"])
        self.reply(
            200,
            json.dumps(
                {
                    "AccessKeyId": akid,
                    "SecretAccessKey": secret,
                    "Token": token,
                    "AccountId": "123456789012",
                    "Expiration": "2099-01-01T00:00:00Z",
                }
            ),
        )


def main():
    with open(sys.argv[1]) as f:
        CONFIG.update(json.load(f))
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
