//! `cargo xtask ha`: PostgreSQL that survives losing a server, and backups that restore, built
//! from Debian's packages and run on loopback:
//!
//! - **etcd**, one member: where Patroni keeps the leader lock and the cluster's settings;
//! - **Patroni** running two PostgreSQL servers with synchronous replication
//!   (`synchronous_mode`: a commit is acknowledged once the standby has it, so the standby
//!   Patroni promotes has every acknowledged commit);
//! - **HAProxy** in front, sending connections only to the server whose Patroni answers
//!   `/primary` with 200, and cutting the sessions of a server marked down
//!   (`on-marked-down shutdown-sessions`), so no client keeps talking to a demoted server;
//! - **pgBackRest**: each server archives its WAL into one repository (whichever is primary
//!   pushes), full backups from the primary, restore to a point in time.
//!
//! Commands:
//! - `cargo xtask ha` starts the set on fixed ports, takes a first full backup, prints how to
//!   point a portal at it and how to try a failover, and waits (Ctrl-C stops everything).
//! - `cargo xtask ha drill [--seconds S] [--seed N]`: two portal replicas, the demo fleet and
//!   the chaos run's clients on the set; the primary is killed (`SIGKILL`, Patroni and
//!   PostgreSQL both: the server is lost) while they launch and release; the chaos audit;
//!   then a point-in-time restore. Prints `RESULT failover …` and `RESULT restore …`.
//!   `cargo xtask test` runs it short.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pgcluster::{Durability, PgCluster, StopOnDrop};

use crate::chaos::{self, Database, Faults, Run};
use crate::proc::{checked_output, http_status, terminate, wait_ready};
use crate::{Result, step, target_dir};

/// The Patroni scope, the pgBackRest stanza and the name of the database the portal uses.
const SCOPE: &str = "portal";
/// The superuser Patroni creates, as `pgcluster` names its own: the portal connects as it.
const SUPERUSER: &str = "portal";
/// Debian's packages the set is made of.
const PACKAGES: [&str; 5] = [
    "postgresql",
    "etcd-server",
    "patroni",
    "haproxy",
    "pgbackrest",
];
/// How long the leader lock lives without its holder renewing it: Patroni's smallest. A lost
/// primary is replaced within about this long.
pub const LEADER_TTL_S: u64 = 20;

/// The most a lost primary may keep the portal from answering.
const UNAVAILABLE_AT_MOST: Duration = Duration::from_secs(30);

/// `cargo xtask ha [drill [--seconds S] [--seed N]]`
pub fn run(args: &[String]) -> Result {
    match args.first().map(String::as_str) {
        None => for_an_operator(),
        Some("drill") => {
            let seconds = chaos::flag(args, "--seconds", 180)?;
            let seed = chaos::flag(args, "--seed", 1)?;
            chaos::build()?;
            drill(seconds, seed)
        }
        Some(other) => Err(format!(
            "`cargo xtask ha` takes nothing, or `drill [--seconds S] [--seed N]` (got `{other}`)"
        )),
    }
}

/// Starts the set on fixed ports with a first full backup, says how to use it, and waits for
/// Ctrl-C.
fn for_an_operator() -> Result {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .map_err(|e| format!("installing the Ctrl-C handler: {e}"))?;
    }
    let dir = target_dir().join("ha");
    let set = HaSet::start(&dir, Ports::fixed())?;
    set.ensure_database(SCOPE)?;
    step("ha: a first full backup (pgBackRest)");
    set.backup()?;
    let d = set.dir().display();
    let p = set.ports();
    eprintln!(
        "\nThe set is up (logs and configuration in {d}):
  PostgreSQL through HAProxy, always the primary: {url}
  the portal on it, in another terminal:          DATABASE_URL={url} cargo xtask dev
  who is primary:                                  patronictl -c {d}/pg1.yml list
  a planned switchover:                            patronictl -c {d}/pg1.yml switchover --force
  lose the primary (then start it again with:      runuser -u postgres -- patroni {d}/pgN.yml):
      kill -9 $(pgrep -f 'patroni {d}/pgN.yml') $(head -1 {d}/pgN/postmaster.pid)
  backups:                                         runuser -u postgres -- pgbackrest --config={d}/pgbackrest.conf --stanza={SCOPE} info
  Patroni's REST API: 127.0.0.1:{a1} and 127.0.0.1:{a2}; etcd: 127.0.0.1:{e}
Ctrl-C stops everything.",
        url = set.url(SCOPE),
        a1 = p.patroni[0],
        a2 = p.patroni[1],
        e = p.etcd_client,
    );
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(200));
    }
    step("ha: stopping");
    Ok(())
}

/// The failover under load, then the point-in-time restore (see the module's comment).
pub fn drill(seconds: u64, seed: u64) -> Result {
    let dir = chaos::fresh_dir("ha-drill")?;
    let set = HaSet::start(&dir.join("ha"), Ports::free()?)?;
    set.ensure_database("chaos")?;
    step("ha drill: the Stripe test server, two portal replicas through HAProxy, the demo fleet");
    let mut run = Run::start(&dir, Database::Ha(set))?;
    step("ha drill: a full backup before any load (what the restore starts from)");
    ha(&run).backup()?;

    let round = run.round(seconds, seed, Faults::Inject)?;
    step("ha drill: releasing what is left, settling, auditing");
    let audit = run.audit(&round)?;
    let worst = round.failovers.iter().map(|f| f.unavailable).max();
    // The clients' 5xx are in the audit; the hosts' calls (heartbeats, claims) are only in the
    // servers' logs. An outage is a 503; a 500 would be ours.
    let errors_500 = answered_500(&dir)?;
    println!(
        "RESULT failover kills={} acknowledged={} lost={} double_bookings={} unavailable_s={:.1} readyz_degraded={} rejoined={} errors_500={}",
        round.failovers.len(),
        audit.value("acknowledged").unwrap_or(-1),
        audit.value("lost").unwrap_or(-1),
        audit.value("double_bookings").unwrap_or(-1),
        worst.unwrap_or_default().as_secs_f64(),
        round.failovers.iter().all(|f| f.degraded_seen),
        round.failovers.len(),
        errors_500.len(),
    );
    audit.passed()?;
    if !errors_500.is_empty() {
        return Err(format!(
            "the servers answered 500 {} times around a lost primary (an outage is a 503):\n{}",
            errors_500.len(),
            errors_500
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    if round.failovers.is_empty() {
        return Err(format!(
            "no primary was lost: {seconds} s is too short for one (at least {} s)",
            LEADER_TTL_S + 30
        ));
    }
    if let Some(w) = worst.filter(|w| *w > UNAVAILABLE_AT_MOST) {
        return Err(format!(
            "the portal was unavailable {:.1} s after a lost primary (at most {} s)",
            w.as_secs_f64(),
            UNAVAILABLE_AT_MOST.as_secs()
        ));
    }
    if round.failovers.iter().any(|f| !f.degraded_seen) {
        return Err("/readyz answered 200 throughout a lost primary's outage".into());
    }

    restore_drill(&mut run, &dir, seed)
}

/// The restore half of the drill: a point marked with the writers stopped, launches and
/// releases after it, then the repository restored to that point into a new cluster with a
/// portal on it, which must hold exactly what the point held.
fn restore_drill(run: &mut Run, dir: &Path, seed: u64) -> Result {
    step(
        "ha drill: the restore point (the portal stopped, its ledger, invoices and allocations noted)",
    );
    run.stop_servers();
    let set = ha(run);
    let target = set.sql("chaos", "SELECT now()")?.trim().to_string();
    let at_target = Holdings::read(&set.bin_dir, &set.url("chaos"))?;
    // Commits after the point are then strictly after it.
    std::thread::sleep(Duration::from_secs(1));
    run.start_servers()?;
    run.round(15, seed + 1, Faults::None)?;
    run.stop_servers();
    let set = ha(run);
    let later = Holdings::read(&set.bin_dir, &set.url("chaos"))?;
    if later == at_target {
        return Err(
            "the launches after the restore point changed nothing a restore could be judged by"
                .into(),
        );
    }
    set.archive_now()?;

    step(&format!(
        "ha drill: restoring to {target} into a new cluster, and a portal on it"
    ));
    let restored = set.restore_to(&target, &dir.join("restored"))?;
    let port = pgcluster::free_port().map_err(|e| e.to_string())?;
    let log = File::create(dir.join("server-restored.log")).map_err(|e| e.to_string())?;
    let mut launch = run.launch().replica(format!("127.0.0.1:{port}"), Some(log));
    launch.database_url = restored.url("chaos");
    let mut server = launch.start_replica()?;
    let ready = wait_ready(&mut server, port, Duration::from_secs(90));
    terminate(&mut server, Duration::from_secs(10));
    ready.map_err(|e| format!("the portal on the restored cluster: {e}"))?;
    let got = Holdings::read(&set.bin_dir, &restored.url("chaos"))?;
    println!(
        "RESULT restore target={target:?} allocations={} postings={} invoices={} equal={} later_allocations={}",
        got.allocations,
        got.postings,
        got.invoices,
        got == at_target,
        later.allocations,
    );
    if got != at_target {
        return Err(format!(
            "the restored cluster differs from the restore point:\n  at the point: {at_target:?}\n  restored:     {got:?}"
        ));
    }
    Ok(())
}

/// The requests the two replicas answered with 500, from their logs.
fn answered_500(dir: &Path) -> Result<Vec<String>> {
    let mut found = Vec::new();
    for log in ["server-1.log", "server-2.log"] {
        let text = std::fs::read_to_string(dir.join(log)).map_err(|e| format!("{log}: {e}"))?;
        found.extend(
            text.lines()
                .filter(|l| l.contains("finished processing request") && l.contains("status=500"))
                .map(|l| format!("{log}: {l}")),
        );
    }
    Ok(found)
}

fn ha(run: &Run) -> &HaSet {
    match &run.db {
        Database::Ha(set) => set,
        Database::Single(_) => unreachable!("the drill runs on the HA set"),
    }
}

/// What a restore must bring back exactly: each ledger account's balance, every invoice's
/// status and total, every allocation's state (as digests, with the counts).
#[derive(Debug, PartialEq, Eq)]
struct Holdings {
    allocations: u64,
    postings: u64,
    invoices: u64,
    balances: String,
    invoice_states: String,
    allocation_states: String,
}

impl Holdings {
    fn read(bin_dir: &Path, url: &str) -> Result<Holdings> {
        let out = psql_at(
            bin_dir,
            url,
            "SELECT (SELECT count(*) FROM allocations), (SELECT count(*) FROM postings),
                    (SELECT count(*) FROM invoices),
                    (SELECT md5(coalesce(string_agg(account_id || ':' || s, ',' ORDER BY account_id), ''))
                       FROM (SELECT account_id, sum(amount_micro) s FROM postings GROUP BY account_id) b),
                    (SELECT md5(coalesce(string_agg(id || ':' || status || ':' || total_minor, ',' ORDER BY id), ''))
                       FROM invoices),
                    (SELECT md5(coalesce(string_agg(id || ':' || state || ':' || desired_state, ',' ORDER BY id), ''))
                       FROM allocations)",
        )?;
        let f: Vec<&str> = out.trim().split('|').collect();
        let n = |i: usize| -> Result<u64> {
            f.get(i)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("reading holdings: {out:?}"))
        };
        let s = |i: usize| f.get(i).unwrap_or(&"").to_string();
        Ok(Holdings {
            allocations: n(0)?,
            postings: n(1)?,
            invoices: n(2)?,
            balances: s(3),
            invoice_states: s(4),
            allocation_states: s(5),
        })
    }
}

/// Where everything listens.
#[derive(Clone, Copy, Debug)]
pub struct Ports {
    pub proxy: u16,
    pub postgres: [u16; 2],
    pub patroni: [u16; 2],
    pub etcd_client: u16,
    pub etcd_peer: u16,
}

impl Ports {
    /// What `cargo xtask ha` uses, so that an operator's commands stay the same across runs.
    pub fn fixed() -> Ports {
        Ports {
            proxy: 5440,
            postgres: [5441, 5442],
            patroni: [8008, 8009],
            etcd_client: 2379,
            etcd_peer: 2380,
        }
    }

    /// Ports free a moment ago, for a test beside anything else on the machine.
    pub fn free() -> Result<Ports> {
        let f = || pgcluster::free_port().map_err(|e| e.to_string());
        Ok(Ports {
            proxy: f()?,
            postgres: [f()?, f()?],
            patroni: [f()?, f()?],
            etcd_client: f()?,
            etcd_peer: f()?,
        })
    }

    fn all(&self) -> [u16; 7] {
        [
            self.proxy,
            self.postgres[0],
            self.postgres[1],
            self.patroni[0],
            self.patroni[1],
            self.etcd_client,
            self.etcd_peer,
        ]
    }
}

/// The running set; everything is stopped when it is dropped.
pub struct HaSet {
    dir: PathBuf,
    ports: Ports,
    /// The uid and gid PostgreSQL runs as (`postgres` when we are root: it refuses root).
    owner: Option<(u32, u32)>,
    bin_dir: PathBuf,
    etcd: Option<Child>,
    members: [Option<Child>; 2],
    haproxy: Option<Child>,
}

impl HaSet {
    /// Writes the configuration under `dir` (emptied first) and starts etcd, the first
    /// server (which bootstraps the cluster), the second (which clones it and becomes the
    /// synchronous standby), HAProxy, and pgBackRest's stanza.
    pub fn start(dir: &Path, ports: Ports) -> Result<HaSet> {
        crate::tools::ensure_debian_packages(&PACKAGES)?;
        if let Some(taken) = ports
            .all()
            .into_iter()
            .find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_err())
        {
            return Err(format!(
                "port {taken} on 127.0.0.1 is taken: by another `cargo xtask ha`, or by a system \
                 service (Debian's etcd-server starts one on 2379 where systemd runs; \
                 `systemctl disable --now etcd`)"
            ));
        }
        let _ = std::fs::remove_dir_all(dir);
        for sub in ["etcd", "backrest", "log", "lock", "spool", "socket"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(|e| format!("{sub}: {e}"))?;
        }
        let dir = dir.canonicalize().map_err(|e| e.to_string())?;
        let owner = postgres_owner()?;
        let mut set = HaSet {
            dir: dir.clone(),
            ports,
            owner,
            bin_dir: pgcluster::find_bin_dir().map_err(|e| e.to_string())?,
            etcd: None,
            members: [None, None],
            haproxy: None,
        };
        set.write_configuration()?;
        if let Some((uid, gid)) = owner {
            hand_over(&dir, uid, gid)?;
        }

        step("ha: etcd, then Patroni's first PostgreSQL server (it bootstraps the cluster)");
        set.etcd = Some(set.spawn_etcd()?);
        wait_until(Duration::from_secs(30), "etcd to answer", || {
            http_status(ports.etcd_client, "/version") == Some(200)
        })?;
        set.members[0] = Some(set.spawn_member(0)?);
        set.wait_member(0, "/primary", Duration::from_secs(90))?;
        step("ha: the second server (cloned from the first, then its synchronous standby)");
        set.members[1] = Some(set.spawn_member(1)?);
        set.wait_member(1, "/sync", Duration::from_secs(90))?;
        step("ha: HAProxy in front, and pgBackRest's stanza");
        set.haproxy = Some(set.spawn_haproxy()?);
        wait_until(
            Duration::from_secs(30),
            "HAProxy to reach the primary",
            || set.sql("postgres", "SELECT 1").is_ok(),
        )?;
        set.backrest(&["stanza-create"])?;
        Ok(set)
    }

    /// `postgres://portal@127.0.0.1:PROXY/{database}`: always the primary, through HAProxy.
    pub fn url(&self, database: &str) -> String {
        format!(
            "postgres://{SUPERUSER}@127.0.0.1:{}/{database}",
            self.ports.proxy
        )
    }

    pub fn ports(&self) -> Ports {
        self.ports
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates `name` unless it exists.
    pub fn ensure_database(&self, name: &str) -> Result {
        let exists = self.sql(
            "postgres",
            &format!("SELECT count(*) FROM pg_database WHERE datname = '{name}'"),
        )?;
        if exists.trim() == "0" {
            self.sql("postgres", &format!("CREATE DATABASE \"{name}\""))?;
        }
        Ok(())
    }

    /// Runs `sql` through HAProxy; its output, unaligned and without headers.
    pub fn sql(&self, database: &str, sql: &str) -> Result<String> {
        psql_at(&self.bin_dir, &self.url(database), sql)
    }

    /// Which server Patroni calls primary now, if one.
    pub fn primary(&self) -> Option<usize> {
        (0..2).find(|&i| http_status(self.ports.patroni[i], "/primary") == Some(200))
    }

    /// Loses server `i` the way a machine is lost: Patroni and PostgreSQL are killed
    /// (`SIGKILL`), with no chance to hand over the lock or to stop cleanly.
    pub fn kill(&mut self, i: usize) -> Result {
        let postmaster = self.postmaster_pid(i);
        if let Some(c) = &mut self.members[i] {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.members[i] = None;
        if let Some(pid) = postmaster {
            let pid = pid.to_string();
            // Its backends too: a lost machine takes every process with it.
            let _ = Command::new("pkill").args(["-KILL", "-P", &pid]).status();
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
        Ok(())
    }

    /// Starts server `i` again; Patroni rewinds it if it was primary on an older timeline and
    /// it follows the new primary.
    pub fn restart(&mut self, i: usize) -> Result {
        self.members[i] = Some(self.spawn_member(i)?);
        Ok(())
    }

    /// Waits until server `i`'s Patroni answers `path` (`/primary`, `/replica`, `/sync`) with
    /// 200.
    pub fn wait_member(&self, i: usize, path: &str, timeout: Duration) -> Result {
        let port = self.ports.patroni[i];
        wait_until(
            timeout,
            &format!("server {} to answer {path}", i + 1),
            || http_status(port, path) == Some(200),
        )
        .map_err(|e| format!("{e} (its log: {})", self.log(i).display()))
    }

    /// A full backup from the primary.
    pub fn backup(&self) -> Result {
        self.backrest(&["backup", "--type=full"])
    }

    /// Closes the current WAL segment and waits until it is in the repository, so that a
    /// restore can reach everything committed so far.
    pub fn archive_now(&self) -> Result {
        self.sql("postgres", "SELECT pg_switch_wal()")?;
        self.backrest(&["check"])
    }

    /// Restores the repository into a new cluster under `root` as it was at `target` (a
    /// `timestamptz` as PostgreSQL prints it), starts it and waits until it has promoted
    /// itself. The restored server archives nothing: it must not write into this set's
    /// repository.
    pub fn restore_to(&self, target: &str, root: &Path) -> Result<StopOnDrop> {
        let _ = std::fs::remove_dir_all(root);
        let data = root.join("data");
        std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
        if let Some((uid, gid)) = self.owner {
            hand_over(root, uid, gid)?;
        }
        set_mode(&data, 0o700)?;
        let pg1_path = format!("--pg1-path={}", data.display());
        let target_flag = format!("--target={target}");
        self.backrest(&[
            &pg1_path,
            "--type=time",
            &target_flag,
            "--target-action=promote",
            "restore",
        ])?;
        // Patroni's postgresql.conf names the original server's files and archive command.
        let settings = format!(
            "archive_mode = 'off'\nhba_file = '{0}/pg_hba.conf'\nident_file = '{0}/pg_ident.conf'\n",
            data.display()
        );
        append(&data.join("postgresql.auto.conf"), &settings)?;
        let pg = StopOnDrop(PgCluster::init(root, Durability::Durable).map_err(|e| e.to_string())?);
        pg.start().map_err(|e| e.to_string())?;
        let url = pg.url("postgres");
        wait_until(
            Duration::from_secs(120),
            "the restored server to promote",
            || {
                psql_at(&self.bin_dir, &url, "SELECT pg_is_in_recovery()")
                    .is_ok_and(|o| o.trim() == "f")
            },
        )?;
        Ok(pg)
    }

    fn postmaster_pid(&self, i: usize) -> Option<u32> {
        std::fs::read_to_string(self.data(i).join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    fn data(&self, i: usize) -> PathBuf {
        self.dir.join(format!("pg{}", i + 1))
    }

    fn log(&self, i: usize) -> PathBuf {
        self.dir.join(format!("pg{}.log", i + 1))
    }

    fn backrest_conf(&self) -> PathBuf {
        self.dir.join("pgbackrest.conf")
    }

    fn write_configuration(&self) -> Result {
        let write = |name: &str, text: String| {
            std::fs::write(self.dir.join(name), text).map_err(|e| format!("{name}: {e}"))
        };
        for i in 0..2 {
            write(&format!("pg{}.yml", i + 1), self.patroni_yml(i))?;
        }
        write("haproxy.cfg", self.haproxy_cfg())?;
        write("pgbackrest.conf", self.backrest_ini())
    }

    /// One server's Patroni configuration. The cluster-wide part (`bootstrap.dcs`) is written
    /// to etcd by whichever server bootstraps; each server's archive command names its own
    /// data directory, which pgBackRest checks against PostgreSQL's.
    fn patroni_yml(&self, i: usize) -> String {
        let p = &self.ports;
        let dir = self.dir.display();
        let n = i + 1;
        let (api, pg) = (p.patroni[i], p.postgres[i]);
        format!(
            r#"scope: {SCOPE}
name: pg{n}
restapi:
  listen: 127.0.0.1:{api}
  connect_address: 127.0.0.1:{api}
etcd3:
  hosts: 127.0.0.1:{etcd}
bootstrap:
  dcs:
    ttl: {LEADER_TTL_S}
    loop_wait: 2
    retry_timeout: 5
    # A standby further behind than this is not promoted.
    maximum_lag_on_failover: 1048576
    # A commit waits for the standby; with it gone, the primary goes on alone rather than stop
    # (synchronous_mode_strict would stop it).
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        wal_log_hints: "on"
        hot_standby: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        max_connections: 300
        archive_mode: "on"
  initdb:
    - encoding: UTF8
    - locale: C
  pg_hba:
    - local all all trust
    - host replication replicator 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:{pg}
  connect_address: 127.0.0.1:{pg}
  data_dir: {dir}/pg{n}
  bin_dir: {bin}
  pgpass: {dir}/pgpass{n}
  authentication:
    superuser:
      username: {SUPERUSER}
    replication:
      username: replicator
    rewind:
      username: {SUPERUSER}
  parameters:
    unix_socket_directories: {dir}/socket
    archive_command: "pgbackrest --config={dir}/pgbackrest.conf --stanza={SCOPE} --pg1-path={dir}/pg{n} archive-push %p"
"#,
            etcd = p.etcd_client,
            bin = self.bin_dir.display(),
        )
    }

    fn haproxy_cfg(&self) -> String {
        let p = &self.ports;
        format!(
            r#"global
    maxconn 1000
defaults
    mode tcp
    timeout connect 2s
    timeout client 30m
    timeout server 30m
    timeout check 2s
# The primary only: Patroni answers /primary with 200 on the server holding the leader lock.
# A server marked down has its sessions cut, so no client goes on talking to a demoted one.
listen primary
    bind 127.0.0.1:{proxy}
    option httpchk OPTIONS /primary
    http-check expect status 200
    default-server inter 1s fall 2 rise 1 on-marked-down shutdown-sessions
    server pg1 127.0.0.1:{pg1} maxconn 300 check port {api1}
    server pg2 127.0.0.1:{pg2} maxconn 300 check port {api2}
"#,
            proxy = p.proxy,
            pg1 = p.postgres[0],
            pg2 = p.postgres[1],
            api1 = p.patroni[0],
            api2 = p.patroni[1],
        )
    }

    /// Both servers are listed: pgBackRest backs up from whichever is primary.
    fn backrest_ini(&self) -> String {
        let dir = self.dir.display();
        let mut ini = format!(
            "[global]\nrepo1-path={dir}/backrest\nrepo1-retention-full=2\nlog-path={dir}/log\n\
             lock-path={dir}/lock\nspool-path={dir}/spool\nstart-fast=y\n\
             log-level-console=warn\n\n[{SCOPE}]\n"
        );
        for i in 0..2 {
            let n = i + 1;
            ini.push_str(&format!(
                "pg{n}-path={dir}/pg{n}\npg{n}-port={}\npg{n}-socket-path={dir}/socket\npg{n}-user={SUPERUSER}\n",
                self.ports.postgres[i]
            ));
        }
        ini
    }

    fn as_owner(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        if let Some((uid, gid)) = self.owner {
            c.uid(uid).gid(gid).env("HOME", &self.dir);
        }
        c.current_dir(&self.dir);
        c
    }

    fn spawn_logged(&self, mut cmd: Command, log: &str) -> Result<Child> {
        let file = File::create(self.dir.join(log)).map_err(|e| format!("{log}: {e}"))?;
        let err = file.try_clone().map_err(|e| e.to_string())?;
        cmd.stdout(file)
            .stderr(err)
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", crate::proc::show(&cmd)))
    }

    fn spawn_etcd(&self) -> Result<Child> {
        let p = &self.ports;
        let client = format!("http://127.0.0.1:{}", p.etcd_client);
        let peer = format!("http://127.0.0.1:{}", p.etcd_peer);
        let mut c = Command::new("etcd");
        c.args(["--name", "ha", "--data-dir"])
            .arg(self.dir.join("etcd"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("ha={peer}")]);
        self.spawn_logged(c, "etcd.log")
    }

    fn spawn_member(&self, i: usize) -> Result<Child> {
        let mut c = self.as_owner("patroni");
        c.arg(self.dir.join(format!("pg{}.yml", i + 1)));
        let log = format!("pg{}.log", i + 1);
        // Appended to, so a restarted server's log follows its earlier life.
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(&log))
            .map_err(|e| format!("{log}: {e}"))?;
        let err = file.try_clone().map_err(|e| e.to_string())?;
        c.stdout(file).stderr(err).stdin(Stdio::null());
        c.spawn().map_err(|e| format!("starting Patroni: {e}"))
    }

    fn spawn_haproxy(&self) -> Result<Child> {
        let mut c = Command::new("haproxy");
        c.arg("-f").arg(self.dir.join("haproxy.cfg")).arg("-db");
        self.spawn_logged(c, "haproxy.log")
    }

    fn backrest(&self, args: &[&str]) -> Result {
        let mut c = self.as_owner("pgbackrest");
        c.arg(format!("--config={}", self.backrest_conf().display()))
            .arg(format!("--stanza={SCOPE}"))
            .args(args);
        checked_output(&mut c).map(drop)
    }
}

impl Drop for HaSet {
    fn drop(&mut self) {
        if let Some(c) = &mut self.haproxy {
            terminate(c, Duration::from_secs(5));
        }
        // Patroni stops its PostgreSQL on SIGTERM; a server it no longer runs is stopped here.
        for i in 0..2 {
            if let Some(c) = &mut self.members[i] {
                terminate(c, Duration::from_secs(30));
            }
            // A Patroni an operator started by hand (after trying a lost primary) is ours too.
            let config = self.dir.join(format!("pg{}.yml", i + 1));
            let pattern = format!("patroni {}", config.display());
            if Command::new("pkill")
                .args(["-TERM", "-f", &pattern])
                .status()
                .is_ok_and(|s| s.success())
            {
                let _ = wait_until(Duration::from_secs(30), "Patroni to stop", || {
                    !Command::new("pgrep")
                        .args(["-f", &pattern])
                        .status()
                        .is_ok_and(|s| s.success())
                });
            }
            if let Some(pid) = self.postmaster_pid(i)
                && Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = Command::new("kill")
                    .args(["-QUIT", &pid.to_string()])
                    .status();
            }
        }
        if let Some(c) = &mut self.etcd {
            terminate(c, Duration::from_secs(5));
        }
    }
}

/// The `postgres` user's ids when we are root (PostgreSQL refuses to run as root).
fn postgres_owner() -> Result<Option<(u32, u32)>> {
    if !pgcluster::running_as_root() {
        return Ok(None);
    }
    let id = |flag: &str| -> Result<u32> {
        crate::proc::output(Command::new("id").args([flag, "postgres"]))
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| "there is no `postgres` user (apt-get install postgresql)".to_string())
    };
    Ok(Some((id("-u")?, id("-g")?)))
}

/// Gives `dir` to `uid:gid`, and lets everyone traverse its ancestors (PostgreSQL must reach
/// its data directory).
fn hand_over(dir: &Path, uid: u32, gid: u32) -> Result {
    crate::proc::run(
        Command::new("chown")
            .arg("-R")
            .arg(format!("{uid}:{gid}"))
            .arg(dir),
    )?;
    let mut p = dir.parent();
    while let Some(parent) = p {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(parent) {
            let mode = meta.permissions().mode();
            if mode & 0o001 == 0 {
                set_mode(parent, mode | 0o001)?;
            }
        }
        p = parent.parent();
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> Result {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn append(path: &Path, text: &str) -> Result {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// `psql` at `url`: the output, unaligned and without headers; an error with its message.
pub fn psql_at(bin_dir: &Path, url: &str, sql: &str) -> Result<String> {
    checked_output(Command::new(bin_dir.join("psql")).args([
        "-X",
        "-q",
        "-At",
        "-v",
        "ON_ERROR_STOP=1",
        "-d",
        url,
        "-c",
        sql,
    ]))
}

fn wait_until(timeout: Duration, what: &str, mut ready: impl FnMut() -> bool) -> Result {
    let start = Instant::now();
    while !ready() {
        if start.elapsed() > timeout {
            return Err(format!("waited {} s for {what}", timeout.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Ok(())
}
