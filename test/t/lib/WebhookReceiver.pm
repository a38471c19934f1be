# WebhookReceiver.pm -- a loopback HTTP receiver for the outbox's webhook
# sinks, shared by the TAP tests that deliver to one (040, 061).
#
#     use WebhookReceiver;
#     my $hook = WebhookReceiver->start($tmpdir, secret => 's3cret', lifetime => 900);
#     ok($hook->ready, 'the receiver listens on ' . $hook->url('/hook'))
#       or diag($hook->stderr);
#     ... backfill_outbox_sink('t', 'webhook', $hook->url('/hook') ...) ...
#     my @calls = $hook->records;          # every request so far, in order
#     $hook->release($id);                 # let a held call of message $id answer
#     $hook->stop;
#
# It listens on 127.0.0.1 only, on a free port (reserved as the nodes'
# ports are, so tests running at once never share one), and runs at most
# lifetime seconds (default 900: a bound for a test that dies, not a time
# the test is expected to take).  Each request is recorded as one JSON line:
#   id            the X-Backfill-Id header
#   path          the request's path
#   n             how many requests of that id it has had, this one included
#   valid         with a secret: whether X-Backfill-Signature is the body's
#                 HMAC-SHA256 under it; without one: null
#   content_type  the Content-Type header
#   body          the body, as text
# It answers 200, or 401 when a secret is given and the signature is not
# valid.  The first request of a message whose payload has "hold": true
# waits (up to 600 s) until release($id) is called before it answers; the
# server is threaded, so other requests go on meanwhile.
package WebhookReceiver;

use strict;
use warnings;

use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(usleep time);

my $receiver_py = <<'PY';
import hashlib, hmac, json, os, sys, threading, time
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

port, logpath, dirpath, ready, secret = (int(sys.argv[1]), sys.argv[2], sys.argv[3],
                                         sys.argv[4], sys.argv[5].encode())
lock = threading.Lock()
seen = {}

class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get('Content-Length', '0')))
        mid = self.headers.get('X-Backfill-Id')
        valid = None
        if secret:
            want = 'sha256=' + hmac.new(secret, raw, hashlib.sha256).hexdigest()
            valid = hmac.compare_digest(self.headers.get('X-Backfill-Signature', ''), want)
        with lock:
            seen[mid] = seen.get(mid, 0) + 1
            n = seen[mid]
            with open(logpath, 'a') as f:
                f.write(json.dumps({'id': mid, 'path': self.path, 'n': n, 'valid': valid,
                                    'content_type': self.headers.get('Content-Type'),
                                    'body': raw.decode('utf-8', 'replace')}) + '\n')
        try:
            payload = json.loads(raw).get('payload')
        except Exception:
            payload = None
        # the first call of a message whose payload says "hold" waits until released
        if isinstance(payload, dict) and payload.get('hold') and n == 1:
            release = os.path.join(dirpath, 'release_' + str(mid))
            deadline = time.time() + 600
            while not os.path.exists(release) and time.time() < deadline:
                time.sleep(0.05)
        try:
            self.send_response(401 if valid is False else 200)
            self.send_header('Content-Length', '0')
            self.end_headers()
        except Exception:
            pass

    def log_message(self, *args):
        pass

ThreadingHTTPServer.daemon_threads = True
server = ThreadingHTTPServer(('127.0.0.1', port), Hook)
open(ready, 'w').close()
server.serve_forever()
PY

# Start a receiver whose files live in $dir; waits (up to 120 s) until it listens.
sub start
{
	my ($class, $dir, %opts) = @_;
	my $self = bless {
		dir => $dir,
		log => "$dir/hooks.jsonl",
		ready => "$dir/receiver.ready",
		port => PostgreSQL::Test::Cluster::get_free_port(),
		stdout => '',
		stderr => '',
	}, $class;
	my $script = "$dir/receiver.py";
	my $python = -x '/usr/bin/python3' ? '/usr/bin/python3' : 'python3';

	open(my $fh, '>', $script) or die "could not write $script: $!";
	print $fh $receiver_py;
	close($fh);
	$self->{handle} = IPC::Run::start(
		[
			'timeout', $opts{lifetime} // 900, $python, $script,
			$self->{port}, $self->{log}, $dir, $self->{ready}, $opts{secret} // ''
		],
		'>', \$self->{stdout}, '2>', \$self->{stderr});
	my $deadline = time() + 120;
	usleep(50_000) until -e $self->{ready} || time() > $deadline;
	return $self;
}

sub port { return $_[0]->{port}; }

# true once the receiver listens
sub ready { return -e $_[0]->{ready}; }

# what the receiver wrote on stderr (for a diag)
sub stderr
{
	my ($self) = @_;
	$self->{handle}->pump_nb if $self->{handle}->pumpable;
	return $self->{stderr};
}

# the URL of a path on the receiver
sub url
{
	my ($self, $path) = @_;
	return "http://127.0.0.1:$self->{port}$path";
}

# every request recorded so far, in the order they arrived
sub records
{
	my ($self) = @_;
	return () unless -e $self->{log};
	return map { decode_json($_) } grep { /\S/ } split /\n/, slurp_file($self->{log});
}

# let the held first call of message $id answer
sub release
{
	my ($self, $id) = @_;
	open(my $fh, '>', "$self->{dir}/release_$id") or die "could not release $id: $!";
	close($fh);
	return;
}

sub stop
{
	my ($self) = @_;
	$self->{handle}->kill_kill;
	return;
}

1;
