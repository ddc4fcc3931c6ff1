// The recipe checks, one method each: two clients (a and b), each
// returning a line of detail or throwing what went wrong.

package warden.compat;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.api.transaction.CuratorOp;
import org.apache.curator.framework.api.transaction.CuratorTransactionResult;
import org.apache.curator.framework.recipes.atomic.AtomicValue;
import org.apache.curator.framework.recipes.atomic.DistributedAtomicLong;
import org.apache.curator.framework.recipes.barriers.DistributedBarrier;
import org.apache.curator.framework.recipes.barriers.DistributedDoubleBarrier;
import org.apache.curator.framework.recipes.cache.ChildData;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;
import org.apache.curator.framework.recipes.cache.NodeCache;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.nodes.GroupMember;
import org.apache.curator.framework.recipes.nodes.PersistentNode;
import org.apache.curator.framework.recipes.nodes.PersistentTtlNode;
import org.apache.curator.framework.recipes.queue.DistributedQueue;
import org.apache.curator.framework.recipes.queue.QueueBuilder;
import org.apache.curator.framework.recipes.queue.QueueConsumer;
import org.apache.curator.framework.recipes.queue.QueueSerializer;
import org.apache.curator.framework.recipes.shared.SharedCount;
import org.apache.curator.framework.recipes.shared.SharedCountListener;
import org.apache.curator.framework.recipes.shared.SharedCountReader;
import org.apache.curator.framework.recipes.shared.VersionedValue;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;

import static warden.compat.Support.*;

final class Recipes {
    private Recipes() {
    }

    /**
     * getConfig (/zookeeper/config), and Curator's EnsembleTracker, which
     * parses it with ZooKeeper's own config parser and derives the client
     * connection string from it: every member, at its ZooKeeper port.
     */
    static String ensemble(CuratorFramework a) throws Exception {
        String config = text(a.getConfig().forEnsemble());
        check(config.startsWith("server.") && config.contains("\nversion="), "getConfig: " + config);
        List<String> want = new ArrayList<>(Arrays.asList(hosts.split(",")));
        Collections.sort(want);
        await(() -> tracked(a).equals(want), "EnsembleTracker's members " + want + " (has " + tracked(a) + ")");
        return "config parsed by ZooKeeper's parser; members " + tracked(a);
    }

    /**
     * Four holders (two per client) take the mutex in turn and each does a
     * read-modify-write of a counter node without a version check: any
     * overlap loses an update (and is counted directly too).
     */
    static String mutex(CuratorFramework a, CuratorFramework b) throws Exception {
        String lock = BASE + "/mutex/lock";
        String counter = BASE + "/mutex/counter";
        a.create().creatingParentsIfNeeded().forPath(counter, bytes("0"));
        AtomicInteger inside = new AtomicInteger();
        AtomicInteger overlaps = new AtomicInteger();
        int rounds = 10;
        AtomicInteger next = new AtomicInteger();
        together(4, () -> {
            CuratorFramework c = next.getAndIncrement() % 2 == 0 ? a : b;
            InterProcessMutex m = new InterProcessMutex(c, lock);
            for (int i = 0; i < rounds; i++) {
                check(m.acquire(STEP_MS, TimeUnit.MILLISECONDS), "acquire timed out");
                try {
                    if (inside.incrementAndGet() != 1) {
                        overlaps.incrementAndGet();
                    }
                    int v = Integer.parseInt(text(c.getData().forPath(counter)));
                    c.setData().forPath(counter, bytes(Integer.toString(v + 1)));
                    inside.decrementAndGet();
                } finally {
                    m.release();
                }
            }
            return null;
        });
        check(overlaps.get() == 0, overlaps + " overlapping holders");
        // a's server may apply b's last write a moment after b heard of it.
        await(() -> data(a, counter).equals(Integer.toString(4 * rounds)),
                "counter " + 4 * rounds + " (it is " + data(a, counter) + "; less: lost updates)");
        int total = Integer.parseInt(data(a, counter));
        // Re-entrant: the same holder twice, then released twice.
        InterProcessMutex m = new InterProcessMutex(a, lock);
        check(m.acquire(STEP_MS, TimeUnit.MILLISECONDS), "acquire");
        check(m.acquire(STEP_MS, TimeUnit.MILLISECONDS), "re-entrant acquire");
        m.release();
        check(m.isAcquiredInThisProcess(), "held after one of two releases");
        InterProcessMutex other = new InterProcessMutex(b, lock);
        check(!other.acquire(300, TimeUnit.MILLISECONDS), "another client got a held lock");
        m.release();
        check(other.acquire(STEP_MS, TimeUnit.MILLISECONDS), "acquire after release");
        other.release();
        return "4 holders x " + rounds + " rounds, 0 overlaps, counter " + total + "; re-entrant";
    }

    static String readWriteLock(CuratorFramework a, CuratorFramework b) throws Exception {
        String path = BASE + "/rwlock";
        InterProcessReadWriteLock la = new InterProcessReadWriteLock(a, path);
        InterProcessReadWriteLock lb = new InterProcessReadWriteLock(b, path);
        check(la.readLock().acquire(STEP_MS, TimeUnit.MILLISECONDS), "read lock a");
        check(lb.readLock().acquire(STEP_MS, TimeUnit.MILLISECONDS), "read lock b (readers share)");
        // Curator's locks belong to the thread that took them: the writer
        // takes and releases on its own thread.
        CountDownLatch written = new CountDownLatch(1);
        CountDownLatch letGo = new CountDownLatch(1);
        Future<Boolean> writer = pool.submit(() -> {
            if (!lb.writeLock().acquire(STEP_MS, TimeUnit.MILLISECONDS)) {
                return false;
            }
            written.countDown();
            letGo.await(STEP_MS, TimeUnit.MILLISECONDS);
            lb.writeLock().release();
            return true;
        });
        // The writer queues behind both readers.
        await(() -> children(a, path) == 3, "the writer's node");
        check(written.getCount() == 1, "writer got in while readers held");
        la.readLock().release();
        lb.readLock().release();
        check(written.await(STEP_MS, TimeUnit.MILLISECONDS), "write lock not granted");
        check(!la.readLock().acquire(300, TimeUnit.MILLISECONDS), "a reader got in while a writer held");
        letGo.countDown();
        check(within(writer, "the writer's release"), "write lock not granted");
        check(la.readLock().acquire(STEP_MS, TimeUnit.MILLISECONDS), "read lock after the writer");
        la.readLock().release();
        return "2 readers shared, writer waited for both, excluded a reader";
    }

    /** Two leases: a third waits (and times out) until one is returned. */
    static String semaphore(CuratorFramework a, CuratorFramework b) throws Exception {
        String path = BASE + "/semaphore";
        InterProcessSemaphoreV2 sa = new InterProcessSemaphoreV2(a, path, 2);
        InterProcessSemaphoreV2 sb = new InterProcessSemaphoreV2(b, path, 2);
        Lease l1 = sa.acquire(STEP_MS, TimeUnit.MILLISECONDS);
        Lease l2 = sb.acquire(STEP_MS, TimeUnit.MILLISECONDS);
        check(l1 != null && l2 != null, "two leases of two");
        check(sa.acquire(300, TimeUnit.MILLISECONDS) == null, "a third lease of two was granted");
        Future<Lease> waiter = pool.submit(() -> sb.acquire(STEP_MS, TimeUnit.MILLISECONDS));
        await(() -> children(a, path + "/leases") == 3, "the waiter's lease node");
        check(!waiter.isDone(), "the waiter got a lease while both were out");
        sa.returnLease(l1);
        Lease l3 = within(waiter, "the freed lease");
        check(l3 != null, "the waiter got no lease after one was returned");
        await(() -> participants(sa) == 2, "2 participant nodes (" + participants(sa) + ")");
        sb.returnLease(l2);
        sb.returnLease(l3);
        // Under contention: four workers, never more than two at once.
        AtomicInteger inside = new AtomicInteger();
        AtomicInteger most = new AtomicInteger();
        AtomicInteger next = new AtomicInteger();
        together(4, () -> {
            InterProcessSemaphoreV2 s = next.getAndIncrement() % 2 == 0 ? sa : sb;
            for (int i = 0; i < 5; i++) {
                Lease l = s.acquire(STEP_MS, TimeUnit.MILLISECONDS);
                check(l != null, "lease timed out");
                int now = inside.incrementAndGet();
                most.accumulateAndGet(now, Math::max);
                a.checkExists().forPath(path);
                inside.decrementAndGet();
                s.returnLease(l);
            }
            return null;
        });
        check(most.get() <= 2, most + " leases out at once of 2");
        return "2 of 2 granted, third waited until one came back; 4 workers x 5, at most " + most + " at once";
    }

    static String leaderLatch(CuratorFramework a, CuratorFramework b) throws Exception {
        String path = BASE + "/latch";
        LeaderLatch la = new LeaderLatch(a, path, "a");
        LeaderLatch lb = new LeaderLatch(b, path, "b");
        la.start();
        lb.start();
        await(() -> la.hasLeadership() ^ lb.hasLeadership(), "one leader of two");
        LeaderLatch leader = la.hasLeadership() ? la : lb;
        LeaderLatch other = leader == la ? lb : la;
        await(() -> agreedLeader(la, lb).equals(leader.getId()), "both latches naming " + leader.getId());
        check(!other.hasLeadership(), "two leaders");
        String first = leader.getId();
        leader.close();
        check(other.await(STEP_MS, TimeUnit.MILLISECONDS), "the other latch did not take over");
        other.close();
        return first + " led, then " + other.getId() + " took over on close";
    }

    static String leaderSelector(CuratorFramework a, CuratorFramework b) throws Exception {
        String path = BASE + "/selector";
        AtomicInteger leading = new AtomicInteger();
        AtomicInteger overlaps = new AtomicInteger();
        List<String> turns = Collections.synchronizedList(new ArrayList<>());
        BlockingQueue<String> done = new LinkedBlockingQueue<>();
        List<LeaderSelector> selectors = new ArrayList<>();
        for (String name : List.of("a", "b")) {
            CuratorFramework c = name.equals("a") ? a : b;
            LeaderSelector s = new LeaderSelector(c, path, new LeaderSelectorListenerAdapter() {
                @Override
                public void takeLeadership(CuratorFramework cl) throws Exception {
                    if (leading.incrementAndGet() != 1) {
                        overlaps.incrementAndGet();
                    }
                    turns.add(name);
                    cl.checkExists().forPath(path);
                    leading.decrementAndGet();
                    done.add(name);
                }
            });
            s.autoRequeue();
            selectors.add(s);
        }
        selectors.forEach(LeaderSelector::start);
        for (int i = 0; i < 6; i++) {
            poll(done, "leadership turn " + (i + 1));
        }
        selectors.forEach(LeaderSelector::close);
        List<String> seen;
        synchronized (turns) {
            seen = new ArrayList<>(turns);
        }
        check(overlaps.get() == 0, overlaps + " overlapping leaderships");
        check(seen.contains("a") && seen.contains("b"), "one selector never led: " + seen);
        return seen.size() + " turns, requeued, both led, 0 overlaps: " + seen;
    }

    static String barrier(CuratorFramework a, CuratorFramework b) throws Exception {
        String path = BASE + "/barrier";
        DistributedBarrier ba = new DistributedBarrier(a, path);
        DistributedBarrier bb = new DistributedBarrier(b, path);
        ba.setBarrier();
        // b may be on another server, which applies a's write a moment
        // later (ZooKeeper's reads are not linearizable either).
        await(() -> exists(b, path), "b to see the barrier");
        check(!bb.waitOnBarrier(300, TimeUnit.MILLISECONDS), "passed a set barrier");
        Thread[] waiterThread = new Thread[1];
        Future<Boolean> waiter = pool.submit(() -> {
            waiterThread[0] = Thread.currentThread();
            return bb.waitOnBarrier(STEP_MS, TimeUnit.MILLISECONDS);
        });
        // Once it waits (its watch set), take the barrier down: only the
        // watch's event can wake it.
        await(() -> waiterThread[0] != null && waiterThread[0].getState() == Thread.State.TIMED_WAITING,
                "the waiter to wait");
        ba.removeBarrier();
        check(within(waiter, "the waiter"), "the waiter timed out after the barrier was removed");
        return "blocked while set, released by removal";
    }

    static String doubleBarrier(CuratorFramework a, CuratorFramework b) throws Exception {
        String path = BASE + "/double-barrier";
        DistributedDoubleBarrier da = new DistributedDoubleBarrier(a, path, 2);
        DistributedDoubleBarrier db = new DistributedDoubleBarrier(b, path, 2);
        Future<Boolean> first = pool.submit(() -> da.enter(STEP_MS, TimeUnit.MILLISECONDS));
        await(() -> children(b, path) >= 1, "the first member's node");
        check(!first.isDone(), "entered alone");
        check(db.enter(STEP_MS, TimeUnit.MILLISECONDS), "second member could not enter");
        check(within(first, "the first member"), "first member did not enter");
        Future<Boolean> leave = pool.submit(() -> da.leave(STEP_MS, TimeUnit.MILLISECONDS));
        check(db.leave(STEP_MS, TimeUnit.MILLISECONDS), "second member could not leave");
        check(within(leave, "the first member leaving"), "first member did not leave");
        return "first waited for the second; both entered and left";
    }

    static String atomicLong(CuratorFramework a, CuratorFramework b) throws Exception {
        String path = BASE + "/atomic-long";
        DistributedAtomicLong xa = new DistributedAtomicLong(a, path, new RetryNTimes(50, 10));
        DistributedAtomicLong xb = new DistributedAtomicLong(b, path, new RetryNTimes(50, 10));
        AtomicInteger next = new AtomicInteger();
        together(4, () -> {
            DistributedAtomicLong x = next.getAndIncrement() % 2 == 0 ? xa : xb;
            for (int i = 0; i < 10; i++) {
                AtomicValue<Long> v = x.increment();
                check(v.succeeded(), "increment did not succeed");
            }
            return null;
        });
        await(() -> atomicValue(xa) == 40, "value 40 (it is " + atomicValue(xa) + ")");
        long value = atomicValue(xa);
        return "4 workers x 10 increments = " + value;
    }

    /**
     * CuratorCache (addWatch PERSISTENT_RECURSIVE underneath): events for
     * creates, changes and deletes below its path, made by another client.
     */
    static String curatorCache(CuratorFramework a, CuratorFramework b) throws Exception {
        String path = BASE + "/cache";
        a.create().creatingParentsIfNeeded().forPath(path, bytes("root"));
        BlockingQueue<String> events = new LinkedBlockingQueue<>();
        CuratorCache cache = CuratorCache.build(a, path);
        cache.listenable().addListener(CuratorCacheListener.builder()
                .forCreates(n -> events.add("create " + n.getPath() + " " + text(n.getData())))
                .forChanges((old, n) -> events.add("change " + n.getPath() + " " + text(n.getData())))
                .forDeletes(old -> events.add("delete " + old.getPath()))
                .forInitialized(() -> events.add("initialized"))
                .build());
        cache.start();
        try {
            List<String> expected = new ArrayList<>();
            List<String> seen = new ArrayList<>();
            expect(events, seen, expected, "create " + path + " root");
            expect(events, seen, expected, "initialized");
            b.create().forPath(path + "/x", bytes("1"));
            expect(events, seen, expected, "create " + path + "/x 1");
            b.setData().forPath(path + "/x", bytes("2"));
            expect(events, seen, expected, "change " + path + "/x 2");
            b.create().forPath(path + "/x/y", bytes("3"));
            expect(events, seen, expected, "create " + path + "/x/y 3");
            b.delete().forPath(path + "/x/y");
            expect(events, seen, expected, "delete " + path + "/x/y");
            b.delete().forPath(path + "/x");
            expect(events, seen, expected, "delete " + path + "/x");
            check(cache.get(path + "/x").isEmpty(), "the cache still holds a deleted node");
            return seen.size() + " events in order (create, change, nested create, deletes)";
        } finally {
            cache.close();
        }
    }

    static void expect(BlockingQueue<String> events, List<String> seen, List<String> expected, String want)
            throws InterruptedException {
        expected.add(want);
        String got = events.poll(STEP_MS, TimeUnit.MILLISECONDS);
        if (got != null) {
            seen.add(got);
        }
        check(want.equals(got), "expected events " + expected + ", got " + seen);
    }

    @SuppressWarnings("deprecation")
    static String nodeCache(CuratorFramework a, CuratorFramework b) throws Exception {
        String path = BASE + "/node-cache";
        a.create().creatingParentsIfNeeded().forPath(BASE + "/node-cache-parent");
        NodeCache cache = new NodeCache(a, path);
        BlockingQueue<String> seen = new LinkedBlockingQueue<>();
        cache.getListenable().addListener(() -> {
            ChildData d = cache.getCurrentData();
            seen.add(d == null ? "gone" : text(d.getData()));
        });
        cache.start(true);
        try {
            check(cache.getCurrentData() == null, "a missing node cached as present");
            List<String> got = new ArrayList<>();
            b.create().forPath(path, bytes("1"));
            got.add(poll(seen, "the create"));
            b.setData().forPath(path, bytes("2"));
            got.add(poll(seen, "the change"));
            b.delete().forPath(path);
            got.add(poll(seen, "the delete"));
            check(got.equals(List.of("1", "2", "gone")), "saw " + got);
            return "create, change, delete seen: " + got;
        } finally {
            cache.close();
        }
    }

    static String persistentNode(CuratorFramework a, CuratorFramework b) throws Exception {
        String path = BASE + "/persistent/node";
        a.create().creatingParentsIfNeeded().forPath(BASE + "/persistent");
        PersistentNode node = new PersistentNode(a, CreateMode.EPHEMERAL, false, path, bytes("p1"));
        node.start();
        try {
            check(node.waitForInitialCreate(STEP_MS, TimeUnit.MILLISECONDS), "not created");
            await(() -> data(b, path).equals("p1"), "b to read the node's data");
            long owner = b.checkExists().forPath(path).getEphemeralOwner();
            check(owner == a.getZookeeperClient().getZooKeeper().getSessionId(), "not a's ephemeral");
            // Someone deletes it: the recipe puts it back.
            b.delete().forPath(path);
            await(() -> exists(b, path), "the node to be recreated");
            node.setData(bytes("p2"));
            await(() -> data(b, path).equals("p2"), "the new data");
        } finally {
            node.close();
        }
        await(() -> !exists(b, path), "the node to go with close");
        return "created, recreated after a delete, data updated, removed on close";
    }

    static String transaction(CuratorFramework a, CuratorFramework b) throws Exception {
        String p = BASE + "/txn";
        a.create().creatingParentsIfNeeded().forPath(p);
        List<CuratorTransactionResult> results = a.transaction().forOperations(
                a.transactionOp().create().forPath(p + "/x", bytes("1")),
                a.transactionOp().create().withMode(CreateMode.PERSISTENT_SEQUENTIAL).forPath(p + "/seq-"),
                a.transactionOp().setData().forPath(p + "/x", bytes("2")),
                a.transactionOp().check().withVersion(1).forPath(p + "/x"));
        check(results.size() == 4, results.size() + " results");
        String seq = results.get(1).getResultPath();
        check(seq != null && seq.startsWith(p + "/seq-"), "sequential path " + seq);
        await(() -> data(b, p + "/x").equals("2"), "b to read x = 2 (it is " + data(b, p + "/x") + ")");
        // A failing check rolls back the create before it.
        CuratorOp create = a.transactionOp().create().forPath(p + "/y");
        CuratorOp badCheck = a.transactionOp().check().withVersion(99).forPath(p + "/x");
        try {
            a.transaction().forOperations(create, badCheck);
            throw new IllegalStateException("a transaction with a failing check committed");
        } catch (KeeperException.BadVersionException expected) {
            // ZooKeeper's answer.
        }
        check(!exists(b, p + "/y"), "the rolled-back create is visible");
        return "4 ops committed (create, sequential, set, check); a failing check rolled back";
    }

    static String sharedCount(CuratorFramework a, CuratorFramework b) throws Exception {
        String path = BASE + "/shared-count";
        SharedCount ca = new SharedCount(a, path, 0);
        SharedCount cb = new SharedCount(b, path, 0);
        BlockingQueue<Integer> heard = new LinkedBlockingQueue<>();
        cb.addListener(new SharedCountListener() {
            @Override
            public void countHasChanged(SharedCountReader reader, int newCount) {
                heard.add(newCount);
            }

            @Override
            public void stateChanged(CuratorFramework client, ConnectionState state) {
            }
        });
        ca.start();
        cb.start();
        try {
            ca.setCount(5);
            check(poll(heard, "the other client's count change") == 5, "b heard another count");
            await(() -> cb.getCount() == 5, "b's count to be 5");
            await(() -> ca.getCount() == 5, "a's count to be 5");
            VersionedValue<Integer> stale = ca.getVersionedValue();
            check(cb.trySetCount(cb.getVersionedValue(), 6), "a compare-and-set from the current version failed");
            check(!ca.trySetCount(stale, 7), "a compare-and-set from a stale version succeeded");
            await(() -> ca.getCount() == 6, "a's count to be 6");
            return "set 5 heard by the other client; CAS from the current version won, from a stale one lost";
        } finally {
            ca.close();
            cb.close();
        }
    }

    static String queue(CuratorFramework a, CuratorFramework b) throws Exception {
        String path = BASE + "/queue";
        QueueSerializer<String> text = new QueueSerializer<String>() {
            @Override
            public byte[] serialize(String item) {
                return bytes(item);
            }

            @Override
            public String deserialize(byte[] raw) {
                return text(raw);
            }
        };
        BlockingQueue<String> consumed = new LinkedBlockingQueue<>();
        QueueConsumer<String> consumer = new QueueConsumer<String>() {
            @Override
            public void consumeMessage(String item) {
                consumed.add(item);
            }

            @Override
            public void stateChanged(CuratorFramework client, ConnectionState state) {
            }
        };
        DistributedQueue<String> producer = QueueBuilder.builder(a, null, text, path).buildQueue();
        DistributedQueue<String> reader = QueueBuilder.builder(b, consumer, text, path).buildQueue();
        producer.start();
        reader.start();
        try {
            List<String> sent = new ArrayList<>();
            for (int i = 0; i < 10; i++) {
                sent.add("item-" + i);
                producer.put("item-" + i);
            }
            List<String> got = new ArrayList<>();
            for (int i = 0; i < 10; i++) {
                got.add(poll(consumed, "item " + i));
            }
            check(got.equals(sent), "consumed " + got);
            await(() -> children(a, path) == 0, "the queue to empty");
            return "10 items from one client consumed in order by the other";
        } finally {
            producer.close();
            reader.close();
        }
    }

    static String groupMember(CuratorFramework a, CuratorFramework b) throws Exception {
        String path = BASE + "/group";
        GroupMember ma = new GroupMember(a, path, "a", bytes("pa"));
        GroupMember mb = new GroupMember(b, path, "b", bytes("pb"));
        ma.start();
        mb.start();
        try {
            await(() -> ma.getCurrentMembers().keySet().equals(Set.of("a", "b"))
                    && mb.getCurrentMembers().keySet().equals(Set.of("a", "b")), "both members seen by both");
            check(text(ma.getCurrentMembers().get("b")).equals("pb"), "b's payload");
            mb.close();
            await(() -> ma.getCurrentMembers().keySet().equals(Set.of("a")), "b to leave a's view");
            return "both saw both (with payloads); b's leaving seen";
        } finally {
            ma.close();
            mb.close();
        }
    }

    /** A container holding a TTL node: gone by itself, TTL then container, once closed. */
    static String persistentTtlNode(CuratorFramework a, CuratorFramework b) throws Exception {
        String path = BASE + "/ttl-node";
        PersistentTtlNode node = new PersistentTtlNode(a, path, 1_000, bytes("alive"));
        node.start();
        try {
            check(node.waitForInitialCreate(STEP_MS, TimeUnit.MILLISECONDS), "not created");
            await(() -> data(b, path).equals("alive"), "the node's data");
            // Its first touch (every ttl/2) makes the TTL child that keeps
            // the container; closing stops the touches and deletes nothing.
            await(() -> exists(b, path + "/touch"), "the TTL child");
        } finally {
            node.close();
        }
        // Nothing deletes it: its TTL child expires, then the emptied container goes.
        await(() -> !exists(b, path), "the TTL node and its container to expire");
        return "created (container + TTL child), touched, then expired on its own after close";
    }
}
