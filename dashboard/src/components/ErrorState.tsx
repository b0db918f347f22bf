// The error page of a table or panel: which URL failed, why, and how to fix it (Settings, Retry, Clear filters).
import { describeFailure } from '../api/errors';
import { navigate } from '../router';
import { useConfig } from '../state/config';

export function ErrorState({
  error, things, onRetry, filtersActive, onClearFilters, compact,
}: {
  error: unknown;
  /** What could not be loaded, e.g. "rollouts". */
  things: string;
  onRetry?: () => void;
  filtersActive?: boolean;
  onClearFilters?: () => void;
  /** A smaller block inside a card (the page's table shows the full page with the fix): what failed and Retry. */
  compact?: boolean;
}) {
  const { client } = useConfig();
  const failure = describeFailure(error, client.serverKey, window.location.origin);
  return (
    <div className={`error-state${compact ? ' compact' : ''}`} role="alert" data-testid="error-state" data-kind={failure.kind} data-url={failure.url ?? ''}>
      <div className="dim small">Unable to load {things}</div>
      <div className="empty-title error-title" data-testid={failure.kind === 'unauthorized' ? 'unauthorized-state' : 'error-title'}>{failure.title}</div>
      <div className="mono small error-reason" data-testid="error-reason">{failure.reason}</div>
      {!compact && <div className="dim error-fix" data-testid="error-fix">{failure.fix}</div>}
      <div className="button-row">
        {failure.settingsMayHelp && !compact && (
          <button type="button" className="button" onClick={() => navigate('/settings')}>Open Settings</button>
        )}
        {onRetry && <button type="button" className={failure.settingsMayHelp || compact ? 'button subtle' : 'button'} onClick={onRetry}>Retry</button>}
        {filtersActive && onClearFilters && <button type="button" className="button subtle" onClick={onClearFilters}>Clear filters</button>}
      </div>
    </div>
  );
}
