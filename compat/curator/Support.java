// What every recipe check shares: the clients, the deadlines, the waits,
// small readers that never throw.

package warden.compat;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.BooleanSupplier;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.atomic.DistributedAtomicLong;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.server.quorum.QuorumPeer;
import org.apache.zookeeper.server.quorum.flexible.QuorumVerifier;

final class Support {
    /** Deadline for any one wait on the cluster. */
    static final long STEP_MS = 30_000;

    /** The connect string of the cluster under test. */
    static String hosts;
    /** Each run works under its own root, so reruns never meet old nodes. */
    static final String BASE = "/curator-compat-" + System.currentTimeMillis();
    /** Connection states other than CONNECTED seen by any client. */
    static final List<String> troubles = Collections.synchronizedList(new ArrayList<>());
    static final List<CuratorFramework> clients = new ArrayList<>();
    static final ExecutorService pool = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r);
        t.setDaemon(true);
        return t;
    });

    private Support() {
    }

    /** A started client, connected, its connection states recorded. */
    static CuratorFramework client(String name) throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.builder()
                .connectString(hosts)
                .sessionTimeoutMs(15_000)
                .connectionTimeoutMs(5_000)
                .retryPolicy(new ExponentialBackoffRetry(100, 29, 1_000))
                .build();
        c.getConnectionStateListenable().addListener((cl, state) -> {
            if (state != ConnectionState.CONNECTED) {
                troubles.add(name + ":" + state);
            }
        });
        c.start();
        if (!c.blockUntilConnected((int) STEP_MS, TimeUnit.MILLISECONDS)) {
            throw new IllegalStateException("client " + name + " did not connect to " + hosts);
        }
        clients.add(c);
        return c;
    }

    static void check(boolean cond, String what) {
        if (!cond) {
            throw new IllegalStateException(what);
        }
    }

    /** Waits for `cond` with the step deadline, polling. */
    static void await(BooleanSupplier cond, String what) throws InterruptedException {
        long deadline = System.currentTimeMillis() + STEP_MS;
        while (!cond.getAsBoolean()) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("timed out waiting for " + what);
            }
            Thread.sleep(20);
        }
    }

    static <T> T within(Future<T> f, String what) throws Exception {
        try {
            return f.get(STEP_MS, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            throw new IllegalStateException("timed out waiting for " + what);
        }
    }

    static <T> T poll(BlockingQueue<T> q, String what) throws InterruptedException {
        T got = q.poll(STEP_MS, TimeUnit.MILLISECONDS);
        check(got != null, "no " + what + " within " + STEP_MS + " ms");
        return got;
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String text(byte[] b) {
        return b == null ? "null" : new String(b, StandardCharsets.UTF_8);
    }

    /** Runs `body` on `n` threads at once and waits for them all. */
    static void together(int n, Callable<Void> body) throws Exception {
        List<Future<Void>> all = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            all.add(pool.submit(body));
        }
        for (Future<Void> f : all) {
            within(f, "a worker");
        }
    }

    static int participants(InterProcessSemaphoreV2 s) {
        try {
            return s.getParticipantNodes().size();
        } catch (Exception e) {
            return -1;
        }
    }

    static long atomicValue(DistributedAtomicLong x) {
        try {
            return x.get().postValue();
        } catch (Exception e) {
            return -1;
        }
    }

    static int children(CuratorFramework c, String path) {
        try {
            return c.getChildren().forPath(path).size();
        } catch (Exception e) {
            return -1;
        }
    }

    static boolean exists(CuratorFramework c, String path) {
        try {
            return c.checkExists().forPath(path) != null;
        } catch (Exception e) {
            return false;
        }
    }

    static String data(CuratorFramework c, String path) {
        try {
            return text(c.getData().forPath(path));
        } catch (Exception e) {
            return "";
        }
    }

    /** The leader id both latches see, or "" while they disagree. */
    static String agreedLeader(LeaderLatch x, LeaderLatch y) {
        try {
            String l1 = x.getLeader().getId();
            String l2 = y.getLeader().getId();
            return l1.equals(l2) ? l1 : "";
        } catch (Exception e) {
            return "";
        }
    }

    /** The client addresses of the members Curator's EnsembleTracker holds, sorted. */
    static List<String> tracked(CuratorFramework c) {
        List<String> out = new ArrayList<>();
        QuorumVerifier q = c.getCurrentConfig();
        if (q != null) {
            for (QuorumPeer.QuorumServer s : q.getAllMembers().values()) {
                if (s.clientAddr != null) {
                    out.add(s.clientAddr.getHostString() + ":" + s.clientAddr.getPort());
                }
            }
        }
        Collections.sort(out);
        return out;
    }

    /** host:port of the server a client is connected to ("" if none). */
    static String remoteServer(CuratorFramework c) {
        try {
            String s = c.getZookeeperClient().getZooKeeper().toString();
            int at = s.indexOf("remoteserver:");
            if (at < 0) {
                return "";
            }
            String rest = s.substring(at + "remoteserver:".length()).split(" ")[0];
            return rest.startsWith("/") ? rest.substring(1) : rest.replaceFirst("^[^/]*/", "");
        } catch (Exception e) {
            return "";
        }
    }
}
