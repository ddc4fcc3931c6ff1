// The mutex, two latches and a cache across a kill -9 of the Raft leader,
// which the driver performs when asked on stdout.

package warden.compat;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;

import static warden.compat.Support.*;

final class LeaderKill {
    private LeaderKill() {
    }

    /**
     * Across a kill -9 of the leader: a mutex held by a client connected to
     * the leader (when one can be placed there) with another queued, and
     * two latches. After the kill the holder still holds (same session),
     * the queued client gets the lock when released, and one latch leads.
     */
    static String acrossLeaderKill(CuratorFramework b) throws Exception {
        int troublesBefore = troubles.size();
        String lock = BASE + "/kill/lock";
        String latchPath = BASE + "/kill/latch";
        // The holder: a client connected to the leader (the driver names
        // its ZooKeeper address in WARDEN_ZK_LEADER), so that the kill moves
        // it: the Java client picks a server at random, so connect until
        // one lands there.
        CuratorFramework holder = holderOn(System.getenv("WARDEN_ZK_LEADER"));
        InterProcessMutex held = new InterProcessMutex(holder, lock);
        InterProcessMutex queued = new InterProcessMutex(b, lock);
        check(held.acquire(STEP_MS, TimeUnit.MILLISECONDS), "holder's acquire");
        // The queued client takes and releases on its own thread.
        CountDownLatch got = new CountDownLatch(1);
        CountDownLatch letGo = new CountDownLatch(1);
        Future<Boolean> waiter = pool.submit(() -> {
            if (!queued.acquire(120, TimeUnit.SECONDS)) {
                return false;
            }
            got.countDown();
            letGo.await(STEP_MS, TimeUnit.MILLISECONDS);
            queued.release();
            return true;
        });
        await(() -> children(b, lock) == 2, "the queued client's lock node");
        long holderSession = holder.getZookeeperClient().getZooKeeper().getSessionId();
        String holderServer = remoteServer(holder);

        AtomicInteger leaders = new AtomicInteger();
        AtomicInteger overlaps = new AtomicInteger();
        LeaderLatch la = new LeaderLatch(holder, latchPath, "holder");
        LeaderLatch lb = new LeaderLatch(b, latchPath, "b");
        for (LeaderLatch l : List.of(la, lb)) {
            l.addListener(new LeaderLatchListener() {
                @Override
                public void isLeader() {
                    if (leaders.incrementAndGet() > 1) {
                        overlaps.incrementAndGet();
                    }
                }

                @Override
                public void notLeader() {
                    leaders.decrementAndGet();
                }
            });
            l.start();
        }
        await(() -> la.hasLeadership() ^ lb.hasLeadership(), "one leader of two latches");
        String before = la.hasLeadership() ? "holder" : "b";
        // A CuratorCache on the holder's session: its persistent recursive
        // watch must follow the session to the next server (setWatches2).
        String cachePath = BASE + "/kill/cache";
        holder.create().creatingParentsIfNeeded().forPath(cachePath);
        BlockingQueue<String> cached = new LinkedBlockingQueue<>();
        CuratorCache cache = CuratorCache.build(holder, cachePath);
        cache.listenable().addListener(CuratorCacheListener.builder()
                .forCreates(n -> cached.add(n.getPath()))
                .forInitialized(() -> cached.add("initialized"))
                .build());
        cache.start();
        poll(cached, "the cache's own node");
        check("initialized".equals(poll(cached, "the cache's initialization")), "cache not initialized");

        System.out.println("KILL-LEADER holder-on=" + holderServer);
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String said = in.readLine();
        check(said != null && said.startsWith("killed "), "the driver did not kill the leader: " + said);
        String victim = said.substring("killed ".length()).trim();

        // The holder's session survives: connected again, same session, and
        // the queued client still waits.
        check(holder.blockUntilConnected((int) STEP_MS, TimeUnit.MILLISECONDS), "holder did not reconnect");
        check(b.blockUntilConnected((int) STEP_MS, TimeUnit.MILLISECONDS), "b did not reconnect");
        await(() -> !remoteServer(holder).equals(victim), "the holder to leave the killed server");
        check(holder.getZookeeperClient().getZooKeeper().getSessionId() == holderSession,
                "the holder's session changed");
        check(held.isAcquiredInThisProcess(), "the holder lost the mutex");
        check(got.getCount() == 1 && !waiter.isDone(), "the queued client got the lock while it was held");
        await(() -> children(b, lock) == 2, "both lock nodes after the kill");
        held.release();
        check(got.await(STEP_MS, TimeUnit.MILLISECONDS), "the queued client never got the lock");
        letGo.countDown();
        check(within(waiter, "the queued client's release"), "the queued client never got the lock");

        // The latches settle on one leader; closing it hands over.
        await(() -> (la.hasLeadership() ^ lb.hasLeadership()) && !agreedLeader(la, lb).isEmpty(),
                "one leader of two latches after the kill");
        LeaderLatch leader = la.hasLeadership() ? la : lb;
        LeaderLatch other = leader == la ? lb : la;
        check(agreedLeader(la, lb).equals(leader.getId()), "latches disagree on the leader");
        // NOTIFY_LEADER: its listener hears it step down (the default,
        // SILENT, would leave the count of leaders at one).
        leader.close(LeaderLatch.CloseMode.NOTIFY_LEADER);
        check(other.await(STEP_MS, TimeUnit.MILLISECONDS), "the other latch did not take over");
        other.close();
        check(overlaps.get() == 0, overlaps + " moments with two latch leaders");

        // The cache hears of a node made after the move, by another client.
        b.create().forPath(cachePath + "/after-kill");
        String heard = poll(cached, "the cache event after the kill");
        check(heard.equals(cachePath + "/after-kill"), "the cache heard " + heard);
        cache.close();

        // And a fresh client takes the lock through the survivors.
        InterProcessMutex fresh = new InterProcessMutex(client("after-kill"), lock);
        check(fresh.acquire(STEP_MS, TimeUnit.MILLISECONDS), "a new client could not take the lock");
        fresh.release();
        boolean moved = holderServer.equals(victim);
        return "killed " + victim + (moved ? " (the holder's server; it moved to " + remoteServer(holder) + ")" : "")
                + ", session kept, lock held then handed over, its CuratorCache still hears; latch: " + before + " led, then "
                + leader.getId() + " then " + other.getId() + "; connection states "
                + troubles.subList(troublesBefore, troubles.size());
    }

    /** A new client connected to `server` (any server if null), tries bounded. */
    static CuratorFramework holderOn(String server) throws Exception {
        for (int i = 0; ; i++) {
            CuratorFramework c = client("holder");
            if (server == null || server.isEmpty() || remoteServer(c).equals(server) || i == 30) {
                return c;
            }
            clients.remove(c);
            c.close();
        }
    }
}
