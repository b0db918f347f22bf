// The current time (epoch seconds), refreshed every `everyMs`: states derived from heartbeat ages stay current
// without a refetch.
import { useEffect, useState } from 'react';

export function useNow(everyMs = 5000): number {
  const [now, setNow] = useState(() => Date.now() / 1000);
  useEffect(() => {
    const id = window.setInterval(() => setNow(Date.now() / 1000), everyMs);
    return () => window.clearInterval(id);
  }, [everyMs]);
  return now;
}
